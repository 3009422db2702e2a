"""Fuzzer templates: the ops of eager/ops/linalg.py (see fuzz_ops/__init__.py)."""

TEMPLATES: dict = {
    # {a} is any value; flatten it to a matrix first so mat1/mat2 shapes always fit
    "addmm": [
        "{a}.reshape({a}.shape[0] if {a}.ndim else 1, -1)[:, :1].addmm("
        "{a}.reshape({a}.shape[0] if {a}.ndim else 1, -1), "
        "{a}.reshape({a}.shape[0] if {a}.ndim else 1, -1).t(), beta=0.5, alpha=2.0)",
        "eager.nn.functional.linear({a}.reshape(1, -1), {a}.reshape(1, -1), {a}.reshape(-1)[:1])",
    ],
    "baddbmm": [
        "eager.baddbmm({a}.reshape(1, 1, -1)[..., :1], {a}.reshape(1, 1, -1), "
        "{a}.reshape(1, -1, 1), beta={s}, alpha=1.5)",
        "eager.baddbmm({a}.reshape(-1)[:1], {a}.reshape(1, -1, 1), {a}.reshape(1, 1, -1))",
    ],
}
NOT_GENERATED: dict = {}
