"""Fuzzer templates: the ops of eager/ops/stats.py (see fuzz_ops/__init__.py)."""

TEMPLATES: dict = {
    "prod": ["{a}.prod()", "{a}.prod({d}, keepdim={k})"],
    "cumsum": ["{a}.cumsum({d})", "({a}.cumsum({d}) * {b}).logsumexp({d})"],
    "cumprod": ["{a}.cumprod({d})", "{a}.softmax({d}).cumprod({d})"],
    # linrec is internal (no public method): the gradients of cumprod and prod run it, and
    # the fuzzer checks every program's gradient and Hessian-vector product
    "linrec": ["({a}.cumprod({d}) * {b}).sum({d})", "({a} * {b}).prod({d})"],
}
NOT_GENERATED: dict = {}
