"""Fuzzer templates: the ops of eager/ops/joining.py (see fuzz_ops/__init__.py)."""

TEMPLATES: dict = {
    "cat": [
        "eager.cat([{a}, {a} * {s}], {d})",
        "eager.cat([{a}, {a}.flip({d})[:1]], 0)",
        "eager.stack([{a}, {b}.expand({a}.shape)], {d})",
        "{a}.roll(1, {d})",
    ],
}
NOT_GENERATED: dict = {}
