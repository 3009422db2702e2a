"""Fuzzer templates: the ops of eager/ops/pointwise.py (see fuzz_ops/__init__.py)."""

# arguments kept where the functions are well conditioned (acos near 1 would turn the
# last-ulp differences of an upstream tanh into large relative errors)
TEMPLATES: dict = {
    "log1p": ["{a}.abs().log1p()"],
    "expm1": ["{a}.expm1()", "eager.nn.functional.elu({a})"],
    "erf": ["{a}.erf()", "eager.nn.functional.gelu({a})"],
    "tan": ["{a}.tanh().tan()"],
    "asin": ["({a}.tanh() * 0.9).asin()"],
    "acos": ["({a}.tanh() * 0.9).acos()"],
    "atan": ["{a}.atan()"],
    "sinh": ["{a}.sinh()"],
    "cosh": ["{a}.cosh()"],
    "asinh": ["{a}.asinh()"],
    "acosh": ["({a}.abs() + 1.5).acosh()"],
    "atanh": ["({a}.tanh() * 0.9).atanh()"],
    "log2": ["{a}.abs().log2()"],
    "log10": ["({a}.abs() + 0.5).log10()"],
    "exp2": ["{a}.exp2()"],
    "floor": ["{a}.floor()", "({a} * 3).floor()"],
    "ceil": ["{a}.ceil()"],
    "round": ["({a} * 2).round()"],
    "trunc": ["{a}.trunc()"],
    "floor_divide": ["{a} // {b}", "{a} // {s}"],
    "remainder": ["{a} % {b}", "{a} % {s}", "{s} % {a}"],
    "fmod": ["eager.fmod({a}, {b})", "eager.fmod({a}, {s})"],
    "atan2": ["eager.atan2({a}, {b})"],
}
NOT_GENERATED: dict = {}
