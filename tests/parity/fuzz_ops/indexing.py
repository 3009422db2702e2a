"""Fuzzer templates: the ops of eager/ops/indexing.py (see fuzz_ops/__init__.py).

Sorting uses stable=True so PyTorch (when the fuzzer compares with it) orders ties
as eager does."""

TEMPLATES: dict = {
    "gather": [
        "{a}.gather({d}, eager.zeros_like({a}, dtype=eager.int64))",
        "eager.take_along_dim({a}, {a}.argsort(dim={d}, stable=True), {d})",
    ],
    "scatter_add": [
        "eager.zeros_like({a}).scatter_add({d}, eager.zeros_like({a}, dtype=eager.int64), {a})",
        "{a}.scatter_add({d}, {a}.argsort(dim={d}, stable=True), {b})",
    ],
    "scatter": [
        "{a}.scatter({d}, eager.zeros_like({a}, dtype=eager.int64), {s})",
        "{a}.scatter({d}, {a}.argsort(dim={d}, descending=True, stable=True), {b})",
    ],
    "argsort": [
        "{a}.sort(dim={d}, stable=True).values",
        "{a}.sort(dim={d}, descending=True, stable=True).values",
        "{a}.argsort(dim={d}, stable=True).to({a}.dtype)",
    ],
}
NOT_GENERATED: dict = {}
