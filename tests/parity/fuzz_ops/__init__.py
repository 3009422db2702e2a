"""The fuzzer's templates by topic: each module's ``TEMPLATES`` (op name -> statement
templates, in fuzzgen.py's format) and ``NOT_GENERATED`` (op name -> why not), merged
into ``fuzzgen.OP_TEMPLATES``/``NOT_GENERATED``."""

from tests.parity.fuzz_ops import conv, indexing, joining, linalg, pointwise, stats

MODULES = (pointwise, joining, stats, indexing, conv, linalg)
