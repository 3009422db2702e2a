"""Fuzzer templates: the ops of eager/ops/joining.py (see fuzz_ops/__init__.py)."""

TEMPLATES: dict = {}
NOT_GENERATED: dict = {}
