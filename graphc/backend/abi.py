"""What the generated code and the runtime agree on: LLVM types, numpy's and CPython's
struct offsets, return codes, the worker pool's calling convention, and the names of the
symbols the runtime registers for the generated code.

The bottom module of the backend: the lowering (graphc.backend) writes code against these
constants and the runtime (graphc.runtime.native, .pool, .parallel) registers symbols and
checks offsets against the same ones.  It imports nothing of graphc but its errors.
"""

from __future__ import annotations

from llvmlite import ir

from ..errors import TooBigError


class _CheckedInt(ir.IntType):
    """An integer type whose constants must fit it as signed values.  LLVM's IR parser
    silently truncates a constant too wide for its type (an i64 of 2**64 reads as 0), so
    every i32/i64 constant of the generated code -- sizes, offsets, strides, byte counts,
    BLAS dimensions -- is checked when it is made.  The planner refuses sizes numpy cannot
    address first (TooBigError); this is the backstop that makes a truncation impossible."""

    _instance_cache: dict = {}  # not the cache of ir.IntType's (unchecked) instances

    def wrap_constant_value(self, val):
        val = super().wrap_constant_value(val)
        if (
            not isinstance(val, bool)
            and isinstance(val, int)
            and not -(1 << (self.width - 1)) <= val < (1 << (self.width - 1))
        ):
            raise TooBigError(
                f"internal error: the constant {val} does not fit in an "
                f"i{self.width} of the generated code; refusing to compile it "
                "(please report this graph)"
            )
        return val


I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), _CheckedInt(32), _CheckedInt(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
ENTRY = "graphc_entry"

# numpy's PyArrayObject and CPython's PyTupleObject layouts (checked at import by
# graphc.runtime.native)
OB_TYPE_OFFSET = 8
OB_SIZE_OFFSET = 16
TUPLE_ITEMS_OFFSET = 24
DATA_OFFSET = 16
FLAGS_OFFSET = 64
NPY_C_CONTIGUOUS = 0x1
NPY_ALIGNED = 0x100
NPY_WRITEABLE = 0x400

RC_OK, RC_LAYOUT, RC_NOMEM, RC_INDEX, RC_ARGS, RC_TYPE = 0, 1, 2, 3, 4, 5
GIL_FREE_MIN = 1 << 14  # loop elements above which the entry releases the GIL
# loop elements from which schedule's fusion treats a loop as one that threads share;
# the split itself: parallel_policy.PARALLEL_MIN and lowering/conv.py's (2^16)
PARALLEL_MIN = 1 << 18
GEMM_PARALLEL_MIN = 1 << 21  # multiply-adds a matrix product needs before it is split
MAX_THREADS = 64
CHUNKS_PER_THREAD = 4  # chunks per thread of a split loop (claimed dynamically)
MAX_CHUNKS = MAX_THREADS * CHUNKS_PER_THREAD

# The worker pool's entry point (graphc/runtime/pool.py), registered with llvm.add_symbol:
# void graphc_pool_run(void (*chunk)(void *ctx, i64 c), void *ctx, i64 nchunks, i32 nthreads)
POOL_RUN = "graphc_pool_run"
CHUNK_FN = ir.FunctionType(ir.VoidType(), [PTR, I64])
POOL_RUN_FN = ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I32])

# What the entry point uses of the running process, registered under these names with
# llvm.add_symbol by graphc.runtime.native: functions of CPython's stable C API and of
# numpy's C-API table (name -> LLVM function type), the addresses of two type objects,
# and the thread count (graphc.runtime.parallel.NATIVE)
NUM_THREADS = "graphc_num_threads"  # int32, read atomically once per call
PY_SYMBOLS = {
    "graphc_PyArray_New": ir.FunctionType(PTR, [PTR, I32, PTR, I32, PTR, PTR, I32, I32, PTR]),
    "graphc_PyTuple_New": ir.FunctionType(PTR, [I64]),
    "graphc_PyLong_FromSsize_t": ir.FunctionType(PTR, [I64]),
    "graphc_Py_IncRef": ir.FunctionType(ir.VoidType(), [PTR]),
    "graphc_Py_DecRef": ir.FunctionType(ir.VoidType(), [PTR]),
    "graphc_PyEval_SaveThread": ir.FunctionType(PTR, []),
    "graphc_PyEval_RestoreThread": ir.FunctionType(ir.VoidType(), [PTR]),
}
PY_TYPES = ("graphc_PyArray_Type", "graphc_PyTuple_Type")  # the type objects' addresses
