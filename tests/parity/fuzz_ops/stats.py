"""Fuzzer templates: the ops of eager/ops/stats.py (see fuzz_ops/__init__.py)."""

TEMPLATES: dict = {
    "prod": ["{a}.prod()", "{a}.prod({d}, keepdim={k})"],
    "cumsum": ["{a}.cumsum({d})", "({a}.cumsum({d}) * {b}).logsumexp({d})"],
    "cumprod": ["{a}.cumprod({d})", "{a}.softmax({d}).cumprod({d})"],
}
NOT_GENERATED: dict = {}
