"""Fuzzer templates: the ops of eager/ops/conv.py (see fuzz_ops/__init__.py)."""

_F = "eager.nn.functional"

TEMPLATES: dict = {
    "conv2d": [
        f"{_F}.conv2d({{a}}.reshape(1, 1, 1, -1), {{a}}.reshape(1, 1, 1, -1)[..., :2], padding=1)",
        f"{_F}.conv1d({{a}}.reshape(1, 1, -1), {{a}}.reshape(1, 1, -1)[..., :3], padding='same')",
    ],
    "conv2d_input_grad": [
        f"{_F}.conv_transpose2d({{a}}.reshape(1, 1, 1, -1), {{a}}.reshape(1, 1, 1, -1)[..., :2], "
        "stride=2)",
    ],
    "max_pool2d": [f"{_F}.max_pool2d({{a}}.reshape(1, 1, 1, -1), (1, 2))"],
    "max_pool2d_indices": [
        f"{_F}.max_pool2d({{a}}.reshape(1, 1, 1, -1), (1, 2), return_indices=True)[1]"
        ".to({a}.dtype)",
    ],
}
NOT_GENERATED: dict = {
    "conv2d_weight_grad": "made only by the gradients of conv2d/conv_transpose2d; every "
    "value_and_grad of a program with a conv2d template runs it",
    "max_pool2d_grad": "made only by the gradient of max_pool2d; every value_and_grad of a "
    "program with a max_pool2d template runs it",
    "max_pool2d_select": "made only by the second derivative of max_pool2d; the fuzzer's "
    "Hessian-vector product of a max_pool2d program runs it",
}
