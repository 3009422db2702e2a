"""Lowering a scheduled graph (graphc.backend.plan.Plan) to one LLVM module.

The module has one entry point, ``PyObject *graphc_entry(PyObject *self,
PyObject *arrays)``, a CPython ``METH_O`` function (graphc.runtime.native wraps
it in a builtin function object, so a call costs what calling a builtin costs).
``arrays`` is a tuple of the input arrays.  The entry point checks it is a
tuple of the compiled length and that every item's type is exactly numpy's
``ndarray`` (``ob_type == &PyArray_Type``: neither a subclass nor an object
faking ``__class__``), only then reads each array's data pointer and flags
straight from numpy's array struct (offsets checked once at import against
``__array_interface__``), refuses inputs that are not C-contiguous and aligned,
allocates the output arrays itself (numpy's ``PyArray_New``; an output written
over an input in place is that input object), releases the GIL for big graphs,
allocates one arena for intermediates, runs every kernel in order and returns a
new tuple of the outputs.  On failure it frees what it allocated and returns a
Python int instead: 1 the input layout (the caller copies and retries), 2 no
memory for the arena, 3 an index out of bounds (IndexError), 4 not a tuple of
the compiled length, 5 an item that is not exactly an ndarray (the caller
converts subclasses or refuses); or NULL with numpy's MemoryError when an output cannot be
allocated.  The thread count for parallel loops is read from the
``graphc_num_threads`` global (graphc.runtime.parallel).

Each kernel is an internal function whose buffer arguments are ``noalias``
(the memory planner guarantees buffers written by a kernel overlap nothing it
reads), so LLVM vectorizes its loops.  Kernel and value names carry the graph
node ids (``n12``) and each kernel starts with comments naming its nodes and
their source lines.  Graph names and source lines come from the user (or a JSON
file): they reach the IR text only through ``irtext`` (escaped to one line).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from llvmlite import ir

from ..errors import TooBigError, UnsupportedOpError
from ..ir import Graph, describe
from eager.interop import random_op

from . import blas, irtext, vecmath
from .plan import (Gather, Kernel, Plan, View, as_matrix, blas_layout, cstrides, index_view,
                   numel)



class _CheckedInt(ir.IntType):
    """An integer type whose constants must fit it as signed values.  LLVM's IR parser
    silently truncates a constant too wide for its type (an i64 of 2**64 reads as 0), so
    every i32/i64 constant of the generated code -- sizes, offsets, strides, byte counts,
    BLAS dimensions -- is checked when it is made.  The planner refuses sizes numpy cannot
    address first (TooBigError); this is the backstop that makes a truncation impossible."""

    _instance_cache: dict = {}       # not the cache of ir.IntType's (unchecked) instances

    def wrap_constant_value(self, val):
        val = super().wrap_constant_value(val)
        if not isinstance(val, bool) and isinstance(val, int) and \
                not -(1 << (self.width - 1)) <= val < (1 << (self.width - 1)):
            raise TooBigError(f"internal error: the constant {val} does not fit in an "
                              f"i{self.width} of the generated code; refusing to compile it "
                              "(please report this graph)")
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
GIL_FREE_MIN = 1 << 14        # loop elements above which the entry releases the GIL
PARALLEL_MIN = 1 << 18        # elements a loop needs before it is split across threads
GEMM_PARALLEL_MIN = 1 << 21   # multiply-adds a matrix product needs before it is split
MAX_THREADS = 64
CHUNKS_PER_THREAD = 4         # chunks per thread of a split loop (claimed dynamically)
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
NUM_THREADS = "graphc_num_threads"           # int32, read atomically once per call
PY_SYMBOLS = {
    "graphc_PyArray_New": ir.FunctionType(PTR, [PTR, I32, PTR, I32, PTR, PTR, I32, I32, PTR]),
    "graphc_PyTuple_New": ir.FunctionType(PTR, [I64]),
    "graphc_PyLong_FromSsize_t": ir.FunctionType(PTR, [I64]),
    "graphc_Py_IncRef": ir.FunctionType(ir.VoidType(), [PTR]),
    "graphc_Py_DecRef": ir.FunctionType(ir.VoidType(), [PTR]),
    "graphc_PyEval_SaveThread": ir.FunctionType(PTR, []),
    "graphc_PyEval_RestoreThread": ir.FunctionType(ir.VoidType(), [PTR]),
}
PY_TYPES = ("graphc_PyArray_Type", "graphc_PyTuple_Type")    # the type objects' addresses


def reg_type(dtype: np.dtype) -> ir.Type:
    """Type of a value in registers (bool is i1)."""
    return {"float32": F32, "float64": F64, "int64": I64, "int32": I32, "bool": I1}[dtype.name]


def mem_type(dtype: np.dtype) -> ir.Type:
    """Type of an element in memory (bool is one byte)."""
    return {"float32": F32, "float64": F64, "int64": I64, "int32": I32, "bool": I8}[dtype.name]


def _const(dtype: np.dtype, value) -> ir.Constant:
    t = reg_type(dtype)
    if dtype.kind == "f":
        return ir.Constant(t, float(value))
    if dtype.kind == "b":
        return ir.Constant(I1, int(bool(value)))
    return ir.Constant(t, int(value))


class Lowerer:
    """Builds the LLVM module for a Plan."""

    def __init__(self, plan: Plan, name: str) -> None:
        self.plan = plan
        self.g: Graph = plan.g
        self.module = irtext.module(name)
        self.globals: dict = {}
        self._malloc = None
        self._free = None
        self.n_in = len(self.g.inputs)
        self.n_out = len(self.g.outputs)

    # --- entry point ------------------------------------------------------------
    def build(self) -> ir.Module:
        plan = self.plan
        self.builders: dict = {}
        self.epilogues = epilogues(plan)
        kfns = [self._kernel_function(i, k) for i, k in enumerate(plan.kernels)]
        fnty = ir.FunctionType(PTR, [PTR, PTR])
        fn = ir.Function(self.module, fnty, name=ENTRY)
        self_arg, args_tuple = fn.args
        self_arg.name, args_tuple.name = "self", "arrays"
        entry = fn.append_basic_block("entry")
        b = ir.IRBuilder(entry)
        irtext.comment(b, f"graph {self.g.name}: {self.n_in} inputs, {self.n_out} outputs, "
                       f"{len(plan.kernels)} kernels, arena {plan.arena_bytes} bytes")
        b.comment(f"arrays: a tuple of {self.n_in} numpy arrays (type at +{OB_TYPE_OFFSET}, "
                  f"size at +{OB_SIZE_OFFSET}, items at +{TUPLE_ITEMS_OFFSET}); each item's "
                  f"type exactly ndarray, then its data pointer at +{DATA_OFFSET}, flags at "
                  f"+{FLAGS_OFFSET}")
        b.comment("returns a new tuple of the outputs, a Python int (rc) or NULL (MemoryError)")
        tp = b.load(b.gep(args_tuple, [ir.Constant(I64, OB_TYPE_OFFSET)], source_etype=I8),
                    typ=PTR, name="arrays_type")
        size = b.load(b.gep(args_tuple, [ir.Constant(I64, OB_SIZE_OFFSET)], source_etype=I8),
                      typ=I64, name="arrays_size")
        args_ok = b.and_(b.icmp_unsigned("==", tp, self._py_type("graphc_PyTuple_Type")),
                         b.icmp_unsigned("==", size, ir.Constant(I64, self.n_in)))
        load = fn.append_basic_block("load_inputs")
        bad_args = fn.append_basic_block("bad_arguments")
        b.cbranch(args_ok, load, bad_args)
        b.position_at_end(bad_args)
        b.ret(self._rc_object(b, RC_ARGS))
        b.position_at_end(load)
        objs = [b.load(self._item(b, args_tuple, i), typ=PTR, name=f"in{i}")
                for i in range(self.n_in)]
        if objs:                  # nothing is read from an object that is not an ndarray
            array_type = self._py_type("graphc_PyArray_Type")
            exact = ir.Constant(I1, 1)
            for i, obj in enumerate(objs):
                tp = b.load(b.gep(obj, [ir.Constant(I64, OB_TYPE_OFFSET)], source_etype=I8),
                            typ=PTR, name=f"in{i}_type")
                exact = b.and_(exact, b.icmp_unsigned("==", tp, array_type))
            read = fn.append_basic_block("read_arrays")
            bad_type = fn.append_basic_block("not_an_ndarray")
            b.cbranch(exact, read, bad_type)
            b.position_at_end(bad_type)
            b.ret(self._rc_object(b, RC_TYPE))
            b.position_at_end(read)
        data, flags = [], []
        ok = ir.Constant(I1, 1)
        for i, obj in enumerate(objs):
            data.append(b.load(b.gep(obj, [ir.Constant(I64, DATA_OFFSET)], source_etype=I8),
                               typ=PTR, name=f"in{i}_data"))
            fl = b.load(b.gep(obj, [ir.Constant(I64, FLAGS_OFFSET)], source_etype=I8),
                        typ=I32, name=f"in{i}_flags")
            need = ir.Constant(I32, NPY_C_CONTIGUOUS | NPY_ALIGNED)
            ok = b.and_(ok, b.icmp_unsigned("==", b.and_(fl, need), need))
            flags.append(fl)
        ok = self._inplace_guard(b, ok, data, flags)
        alloc = fn.append_basic_block("allocate_outputs")
        bad = fn.append_basic_block("bad_layout")
        b.cbranch(ok, alloc, bad)
        b.position_at_end(bad)
        b.ret(self._rc_object(b, RC_LAYOUT))
        b.position_at_end(alloc)
        result, out_data = self._allocate_outputs(b, fn, objs, data)
        data = data + out_data
        tstate = None
        if releases_gil(plan):
            b.comment("release the GIL while the kernels run")
            tstate = b.call(self._py_fn("graphc_PyEval_SaveThread"), [], name="tstate")
        self._tstate = tstate
        if any(kb.par is not None for kb in self.builders.values()):
            gv = self.module.globals.get(NUM_THREADS)
            if gv is None:
                gv = ir.GlobalVariable(self.module, I32, name=NUM_THREADS)
            self.nthreads = b.load_atomic(gv, "monotonic", 4, typ=I32, name="nthreads")
        arena = None
        if plan.arena_bytes:
            arena = b.call(self._get_malloc(), [ir.Constant(I64, plan.arena_bytes)], name="arena")
            nomem = fn.append_basic_block("no_memory")
            go = fn.append_basic_block("run")
            b.cbranch(b.icmp_unsigned("==", arena, ir.Constant(PTR, None)), nomem, go)
            b.position_at_end(nomem)
            self._fail(b, result, ir.Constant(I32, RC_NOMEM))
            b.position_at_end(go)
        fail = fn.append_basic_block("kernel_failed")
        rc_slot = None
        self._data, self._arena_ptr = data, arena
        fused = set(self.epilogues.values())
        for i, (kern, kfn) in enumerate(zip(plan.kernels, kfns)):
            if i in fused:
                continue                  # run inside its product's shares (see epilogues)
            args = [self._base(b, buf, data, arena) for buf in self._kernel_bufs(kern)]
            if self.builders[i].par is not None:
                j = self.epilogues.get(i)
                then = None
                if j is not None:
                    then = (j, kfns[j], [self._base(b, buf, data, arena)
                                         for buf in self._kernel_bufs(plan.kernels[j])])
                self._parallel_call(b, fn, i, kern, kfn, args, then)
                continue
            rc = b.call(kfn, args, name=f"rc{i}")
            if kern.kind in ("getitem", "getitem_grad", "setitem"):
                nxt = fn.append_basic_block(f"after_k{i}")
                if rc_slot is None:
                    with b.goto_entry_block():
                        rc_slot = b.alloca(I32, name="rc")
                b.store(rc, rc_slot)
                b.cbranch(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), fail, nxt)
                b.position_at_end(nxt)
            for buf in plan.poison_after.get(i, ()):      # Plan(poison=True) only
                self._poison(b, buf, arena)
        if arena is not None:
            b.call(self._get_free(), [arena])
        if tstate is not None:
            b.call(self._py_fn("graphc_PyEval_RestoreThread"), [tstate])
        b.ret(result)
        b.position_at_end(fail)
        if arena is not None:
            b.call(self._get_free(), [arena])
        self._fail(b, result, b.load(rc_slot, typ=I32) if rc_slot is not None
                   else ir.Constant(I32, RC_INDEX))
        return self.module

    def _allocate_outputs(self, b, fn, objs: list, data: list) -> tuple:
        """The result tuple, filled with new arrays (numpy's ``PyArray_New``, C order, the
        compiled shape and dtype) and, for an output written over an input in place, that
        input object.  Returns (tuple, the outputs' data pointers)."""
        b.comment("outputs: new C-order arrays (PyArray_New), in-place ones are their input")
        result = b.call(self._py_fn("graphc_PyTuple_New"), [ir.Constant(I64, self.n_out)],
                        name="result")
        null = ir.Constant(PTR, None)
        failed = fn.append_basic_block("no_result")
        fill = fn.append_basic_block("fill_result")
        b.cbranch(b.icmp_unsigned("==", result, null), failed, fill)
        b.position_at_end(failed)
        b.ret(null)                       # PyTuple_New set MemoryError
        b.position_at_end(fill)
        cleanup = None
        out_data = []
        for k, o in enumerate(self.g.outputs):
            if k in self.plan.inplace:
                src = self.plan.inplace[k]
                b.call(self._py_fn("graphc_Py_IncRef"), [objs[src]])
                b.store(objs[src], self._item(b, result, k))
                out_data.append(data[src])
                continue
            d = self.g.nx.nodes[o]
            shape, dt = tuple(d["shape"]), np.dtype(d["dtype"])
            arr = b.call(self._py_fn("graphc_PyArray_New"), [
                self._py_type("graphc_PyArray_Type"), ir.Constant(I32, len(shape)),
                self._dims_global(shape), ir.Constant(I32, dt.num), null, null,
                ir.Constant(I32, 0), ir.Constant(I32, 0), null], name=f"out{k}")
            if cleanup is None:           # numpy set MemoryError: drop what was made so far
                cleanup = fn.append_basic_block("no_output")
            nxt = fn.append_basic_block(f"made_out{k}")
            b.cbranch(b.icmp_unsigned("==", arr, null), cleanup, nxt)
            b.position_at_end(nxt)
            b.store(arr, self._item(b, result, k))      # the tuple owns it (PyTuple_SET_ITEM)
            out_data.append(b.load(b.gep(arr, [ir.Constant(I64, DATA_OFFSET)], source_etype=I8),
                                   typ=PTR, name=f"out{k}_data"))
        if cleanup is not None:
            here = b.block
            b.position_at_end(cleanup)
            b.call(self._py_fn("graphc_Py_DecRef"), [result])   # unset items are NULL
            b.ret(null)
            b.position_at_end(here)
        return result, out_data

    def _fail(self, b, result, rc) -> None:
        """Take the GIL back (if released), drop the outputs, return ``rc`` as an int."""
        if self._tstate is not None:
            b.call(self._py_fn("graphc_PyEval_RestoreThread"), [self._tstate])
        b.call(self._py_fn("graphc_Py_DecRef"), [result])
        b.ret(self._rc_object(b, rc))

    def _rc_object(self, b, rc):
        if isinstance(rc, int):
            rc = ir.Constant(I32, rc)
        return b.call(self._py_fn("graphc_PyLong_FromSsize_t"), [b.sext(rc, I64)])

    @staticmethod
    def _item(b, tup, i: int):
        """Address of item ``i`` of a tuple (``PyTupleObject.ob_item[i]``)."""
        return b.gep(tup, [ir.Constant(I64, TUPLE_ITEMS_OFFSET + 8 * i)], source_etype=I8)

    def _py_fn(self, name: str) -> ir.Function:
        f = self.module.globals.get(name)
        if f is None:
            f = ir.Function(self.module, PY_SYMBOLS[name], name=name)
        return f

    def _py_type(self, name: str):
        gv = self.module.globals.get(name)
        if gv is None:
            gv = ir.GlobalVariable(self.module, I8, name=name)   # only its address is used
        return gv

    def _dims_global(self, shape: tuple):
        if not shape:
            return ir.Constant(PTR, None)
        name = "dims_" + "x".join(map(str, shape))
        gv = self.module.globals.get(name)
        if gv is None:
            ty = ir.ArrayType(I64, len(shape))
            gv = ir.GlobalVariable(self.module, ty, name=name)
            gv.initializer = ir.Constant(ty, [int(n) for n in shape])
            gv.global_constant = True
            gv.linkage = "internal"
        return gv

    def _parallel_call(self, b, fn, i: int, kern: Kernel, kfn, args: list,
                       then: Optional[tuple] = None) -> None:
        """Run kernel i's outer loop as chunks on graphc's worker pool, then combine the
        per-chunk partial reductions in chunk order.  The chunks depend only on the thread
        count (one chunk for 1 thread: the serial loop), not on which thread runs which,
        so results are deterministic per thread count.  ``then`` = (j, kfn_j, args_j): an
        epilogue loop kernel each chunk runs right after its share of product i, over the
        same rows, while they are in that core's cache."""
        kb = self.builders[i]
        size = kb.outer_size
        nred = len(kern.reduces)
        if then is not None:
            args = args + then[2]
        nargs = len(args)
        with b.goto_entry_block():       # 8-byte slots: kernel args, partials, chunk count
            ctx = b.bitcast(b.alloca(I64, size=nargs + 2, name=f"k{i}_ctx"), PTR)
            partials = b.bitcast(b.alloca(I64, size=MAX_CHUNKS * max(nred, 1),
                                          name=f"k{i}_partials"), PTR)
        nt = b.select(b.icmp_signed("<", self.nthreads, ir.Constant(I32, 1)),
                      ir.Constant(I32, 1), self.nthreads)
        nt = b.select(b.icmp_signed(">", nt, ir.Constant(I32, MAX_THREADS)),
                      ir.Constant(I32, MAX_THREADS), nt)
        nt64 = b.zext(nt, I64)
        per_thread = 1 if kern.kind == "matmul" else CHUNKS_PER_THREAD   # B is re-read per chunk
        nchunks = b.select(b.icmp_signed("==", nt64, ir.Constant(I64, 1)), ir.Constant(I64, 1),
                           b.mul(nt64, ir.Constant(I64, per_thread)))
        nchunks = b.select(b.icmp_signed(">", nchunks, ir.Constant(I64, size)),
                           ir.Constant(I64, max(size, 1)), nchunks, name=f"k{i}_nchunks")
        for k, a in enumerate(args):
            b.store(b.ptrtoint(a, I64), b.gep(ctx, [ir.Constant(I64, k)], source_etype=I64))
        b.store(b.ptrtoint(partials, I64), b.gep(ctx, [ir.Constant(I64, nargs)], source_etype=I64))
        b.store(nchunks, b.gep(ctx, [ir.Constant(I64, nargs + 1)], source_etype=I64))
        epi = None
        if then is not None:
            j, kfn_j, args_j = then
            per_row = self.builders[j].outer_size // size   # loop elements per product row
            epi = (kfn_j, len(args) - len(args_j), per_row)
        chunk = self._chunk_function(i, kfn, nargs, size, max(nred, 1), epi)
        b.call(self._pool_run(), [chunk, ctx, nchunks, nt])
        if nred:
            kb.combine_partials(b, fn, partials, nchunks, nred, self._data, self._arena_ptr, i)

    def _chunk_function(self, i: int, kfn, nargs: int, size: int, stride: int,
                        epi: Optional[tuple] = None):
        """``void k<i>_chunk(ctx, c)``: run chunk c of kernel i's outer loop (one of
        ``nchunks`` near-equal ranges of ``[0, size)``) into partial slot c; then, with
        ``epi`` = (epilogue kernel, index of its first argument, its elements per row of
        kernel i), the epilogue over the same rows."""
        f = ir.Function(self.module, CHUNK_FN, name=f"k{i}_chunk")
        f.linkage = "internal"
        f.attributes.add("nounwind")
        ctx, c = f.args
        ctx.name, c.name = "ctx", "chunk"
        bb = ir.IRBuilder(f.append_basic_block("entry"))

        def get(k):
            return bb.load(bb.gep(ctx, [ir.Constant(I64, k)], source_etype=I64), typ=I64)

        args = [bb.inttoptr(get(k), PTR) for k in range(nargs)]
        partials, nchunks = bb.inttoptr(get(nargs), PTR), get(nargs + 1)
        # chunk c starts at c*q + min(c, r) with q, r = divmod(size, nchunks): near-equal
        # ranges without the product c*size, which would overflow for sizes above 2**55
        q = bb.sdiv(ir.Constant(I64, size), nchunks)
        r = bb.srem(ir.Constant(I64, size), nchunks)

        def start(k):
            return bb.add(bb.mul(k, q), bb.select(bb.icmp_signed("<", k, r), k, r))

        lo, hi = start(c), start(bb.add(c, ir.Constant(I64, 1)))
        part = bb.gep(partials, [bb.mul(c, ir.Constant(I64, stride))], source_etype=I64)
        if epi is None:
            bb.call(kfn, args + [lo, hi, part])
        else:
            kfn_j, first, per_row = epi
            bb.call(kfn, args[:first] + [lo, hi, part])
            r = ir.Constant(I64, per_row)
            bb.call(kfn_j, args[first:] + [bb.mul(lo, r), bb.mul(hi, r), part])
        bb.ret_void()
        return f

    def _pool_run(self):
        f = self.module.globals.get(POOL_RUN)
        if f is None:
            f = ir.Function(self.module, POOL_RUN_FN, name=POOL_RUN)
        return f

    def _inplace_guard(self, b, ok, data, flags):
        """An input that an output is written over (``plan.inplace``) must be writeable and
        overlap no other input (``w -= g`` with ``g`` a shifted view of ``w`` would read
        values already written); otherwise rc 1 makes the caller run on copies."""
        targets = sorted(set(self.plan.inplace.values()))
        if not targets:
            return ok
        b.comment("in-place outputs: their inputs must be writeable and overlap no input")
        nbytes = [numel(self.g.nx.nodes[n]["shape"]) *
                  np.dtype(self.g.nx.nodes[n]["dtype"]).itemsize for n in self.g.inputs]
        lo = [b.ptrtoint(p, I64) for p in data[:self.n_in]]
        for i in targets:
            w = ir.Constant(I32, NPY_WRITEABLE)
            ok = b.and_(ok, b.icmp_unsigned("==", b.and_(flags[i], w), w))
            for j in range(self.n_in):
                if j == i or not nbytes[i] or not nbytes[j]:
                    continue
                hi_i = b.add(lo[i], ir.Constant(I64, nbytes[i]))
                hi_j = b.add(lo[j], ir.Constant(I64, nbytes[j]))
                overlap = b.and_(b.icmp_unsigned("<", lo[i], hi_j),
                                 b.icmp_unsigned("<", lo[j], hi_i))
                ok = b.and_(ok, b.xor(overlap, ir.Constant(I1, 1)))
        return ok

    def _get_malloc(self):
        if self._malloc is None:
            self._malloc = ir.Function(self.module, ir.FunctionType(PTR, [I64]), name="malloc")
        return self._malloc

    def _poison(self, b, buf, arena) -> None:
        """Overwrite a dead arena buffer (volatile, so LLVM keeps it): floats become NaN
        (bytes 0xFF), integers and bools 0xA5 bytes; a read through an aliasing bug shows."""
        _, off, nbytes = self.plan.buffers[buf]
        byte = 0xFF if self.plan.dtype(buf).kind == "f" else 0xA5
        memset = self.module.declare_intrinsic("llvm.memset", [PTR, I64])
        b.call(memset, [b.gep(arena, [ir.Constant(I64, off)], source_etype=I8,
                              name=f"poison_n{buf}"),
                        ir.Constant(I8, byte), ir.Constant(I64, nbytes), ir.Constant(I1, 1)])

    def _get_free(self):
        if self._free is None:
            self._free = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]),
                                     name="free")
        return self._free

    def _base(self, b, buf, data, arena):
        """Pointer to the first element of a buffer."""
        if isinstance(buf, tuple):
            kind = buf[0]
            if kind == "in":
                return data[buf[1]]
            if kind == "out":
                return data[self.n_in + buf[1]]
            if kind == "const":
                return self._const_global(buf[1])
        spec = self.plan.buffers[buf]
        if spec[0] == "out":
            if spec[1] in self.plan.inplace:          # written over its input's memory
                return data[self.plan.inplace[spec[1]]]
            return data[self.n_in + spec[1]]
        return b.gep(arena, [ir.Constant(I64, spec[1])], source_etype=I8, name=f"buf_n{buf}")

    def _const_global(self, n: int):
        gv = self.globals.get(n)
        if gv is None:
            v = np.ascontiguousarray(self.g.nx.nodes[n]["attrs"]["value"])
            raw = bytearray(v.astype(v.dtype.newbyteorder("="), copy=False).tobytes())
            ty = ir.ArrayType(I8, max(len(raw), 1))
            gv = ir.GlobalVariable(self.module, ty, name=f"const_n{n}")
            gv.initializer = ir.Constant(ty, raw if raw else bytearray(1))
            gv.global_constant = True
            gv.linkage = "internal"
            gv.align = 64
            self.globals[n] = gv
        return gv

    def _canonical(self, buf):
        return canonical(self.plan, buf)

    def _kernel_bufs(self, kern: Kernel) -> list:
        """A kernel's distinct buffer arguments; an in-place output shares its input's
        argument, so the loop reads and writes through one pointer and vectorizes."""
        return sorted({self._canonical(b) for b in kern.reads | kern.writes}, key=repr)

    # --- kernels ------------------------------------------------------------------
    def _parallel_ok(self, kern: Kernel) -> bool:
        return parallel_ok(self.plan, kern) or any(
            self.plan.kernels[j] is kern for j in self.epilogues.values())

    def _kernel_function(self, i: int, kern: Kernel) -> ir.Function:
        bufs = self._kernel_bufs(kern)
        par = self._parallel_ok(kern)
        extra = [I64, I64, PTR] if par else []
        fn = ir.Function(self.module, ir.FunctionType(I32, [PTR] * len(bufs) + extra),
                         name=f"k{i}_{kern.kind}")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        ptrs = {}
        for buf, arg in zip(bufs, fn.args):
            arg.add_attribute("noalias")          # distinct buffers never overlap
            arg.name = _buf_name(buf)
            ptrs[buf] = arg
        for b in kern.reads | kern.writes:        # in-place outputs: their input's pointer
            if b not in ptrs:
                ptrs[b] = ptrs[self._canonical(b)]
        kb = KernelBuilder(self, fn, ptrs)
        kb.in_place = i in self.plan.alias_kernels
        if par:
            kb.par = fn.args[len(bufs):]
            for a, nm in zip(kb.par, ("start", "end", "partials")):
                a.name = nm
        self.builders[i] = kb
        kb.comment_nodes(kern)
        if kern.kind == "loop":
            kb.loop_kernel(kern)
        elif kern.kind == "matmul":
            kb.matmul_kernel(kern.node)
        elif kern.kind == "argreduce":
            kb.argreduce_kernel(kern.node)
        elif kern.kind == "getitem":
            kb.getitem_kernel(kern.node)
        elif kern.kind == "getitem_grad":
            kb.getitem_grad_kernel(kern.node)
        elif kern.kind == "setitem":
            kb.setitem_kernel(kern.node)
        elif kern.kind == "philox":
            kb.philox_kernel(kern.node)
        else:
            raise UnsupportedOpError(f"no lowering for kernel kind {kern.kind}")
        kb.finish()
        return fn


def _buf_name(buf) -> str:
    if isinstance(buf, tuple):
        return f"{buf[0]}{buf[1]}"
    return f"n{buf}"


class KernelBuilder:
    """Emits one kernel function: loop nests, loads/stores through views, scalar op code."""

    def __init__(self, low: Lowerer, fn: ir.Function, ptrs: dict) -> None:
        self.low = low
        self.plan = low.plan
        self.g = low.g
        self.fn = fn
        self.ptrs = ptrs
        self.entry = fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)
        self.rc = self.b.alloca(I32, name="rc")
        self.b.store(ir.Constant(I32, RC_OK), self.rc)
        self.exit = fn.append_basic_block("exit")
        self.module = low.module
        self.par = None            # (start, end, partials) args of a parallel loop kernel
        self.outer_size = 0
        self.in_place = False      # an output is written over an input (plan.alias_kernels)
        self.trig_flag = None      # i8 slot: a sin/cos argument beyond vecmath's accurate range
        self.trig_exact = False    # emit sin/cos that are exact for every argument

    def finish(self) -> None:
        self.b.branch(self.exit)
        self.b.position_at_end(self.exit)
        self.b.ret(self.b.load(self.rc, typ=I32))

    def comment_nodes(self, kern: Kernel) -> None:
        nodes = [n for n, _ in kern.stores] + list(kern.reduces)
        if kern.node is not None:
            nodes.append(kern.node)
        for n in nodes:
            irtext.comment(self.b, describe(self.g, n))

    # --- helpers ----------------------------------------------------------------
    def alloca(self, ty, name=""):
        with self.b.goto_entry_block():
            return self.b.alloca(ty, name=name)

    def loop(self, sizes: list, body, name: str = "i", outer_range=None) -> None:
        """Nested counted loops over ``sizes``; ``body(idx_values)`` emits the innermost body.
        ``outer_range`` = (start, end) values restrict the outermost loop (a thread's chunk)."""
        b = self.b
        idx = []
        exits = []
        for d, size in enumerate(sizes):
            slot = self.alloca(I64, name=f"{name}{d}_slot")
            lo, hi = ir.Constant(I64, 0), ir.Constant(I64, size)
            if d == 0 and outer_range is not None:
                lo, hi = outer_range
            b.store(lo, slot)
            cond = self.fn.append_basic_block(f"{name}{d}_cond")
            body_bb = self.fn.append_basic_block(f"{name}{d}_body")
            done = self.fn.append_basic_block(f"{name}{d}_done")
            b.branch(cond)
            b.position_at_end(cond)
            i = b.load(slot, typ=I64, name=f"{name}{d}")
            b.cbranch(b.icmp_signed("<", i, hi), body_bb, done)
            b.position_at_end(body_bb)
            idx.append(i)
            exits.append((slot, cond, done, i))
        body(idx)
        for slot, cond, done, i in reversed(exits):
            b.store(b.add(i, ir.Constant(I64, 1), flags=["nsw", "nuw"]), slot)
            b.branch(cond)
            b.position_at_end(done)

    def offset(self, base: int, strides, idx) -> ir.Value:
        b = self.b
        acc = ir.Constant(I64, base)
        for st, i in zip(strides, idx):
            if st == 0:
                continue
            term = i if st == 1 else b.mul(i, ir.Constant(I64, st), flags=["nsw"])
            acc = b.add(acc, term, flags=["nsw"])
        return acc

    def ptr(self, buf, dtype: np.dtype, off: ir.Value):
        return self.b.gep(self.ptrs[buf], [off], source_etype=mem_type(dtype))

    def load(self, buf, dtype: np.dtype, off: ir.Value, name: str = "") -> ir.Value:
        v = self.b.load(self.ptr(buf, dtype, off), typ=mem_type(dtype), name=name)
        if dtype.kind == "b":
            v = self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def store(self, buf, dtype: np.dtype, off: ir.Value, v: ir.Value) -> None:
        if dtype.kind == "b":
            v = self.b.zext(v, I8)
        self.b.store(v, self.ptr(buf, dtype, off))

    def convert(self, v: ir.Value, src: np.dtype, dst: np.dtype) -> ir.Value:
        b = self.b
        if src == dst:
            return v
        if dst.kind == "b":
            if src.kind == "f":
                return b.fcmp_unordered("!=", v, ir.Constant(reg_type(src), 0.0))
            return b.icmp_signed("!=", v, ir.Constant(reg_type(src), 0))
        dt = reg_type(dst)
        if src.kind == "b":
            return b.uitofp(v, dt) if dst.kind == "f" else b.zext(v, dt)
        if src.kind == "f" and dst.kind == "f":
            return b.fpext(v, dt) if dst.itemsize > src.itemsize else b.fptrunc(v, dt)
        if src.kind in "iu" and dst.kind == "f":
            return b.sitofp(v, dt)
        if src.kind == "f" and dst.kind in "iu":
            # eager's rule (numpy's on x86): NaN and values out of range give the integer
            # minimum; fptosi only ever sees values in range (else it is poison)
            lo = int(np.iinfo(dst).min)
            ft = reg_type(src)
            ok = b.and_(b.fcmp_ordered(">=", v, ir.Constant(ft, float(lo))),
                        b.fcmp_ordered("<", v, ir.Constant(ft, -float(lo))))
            safe = b.select(ok, v, ir.Constant(ft, 0.0))
            return b.select(ok, b.fptosi(safe, dt), ir.Constant(dt, lo))
        if dst.itemsize > src.itemsize:
            return b.sext(v, dt)
        return b.trunc(v, dt)

    # --- scalar op code ---------------------------------------------------------------
    def math(self, name: str, t: ir.Type, *args) -> ir.Value:
        return self.b.call(vecmath.get_function(self.module, name, t), list(args))

    def isnan(self, v):
        return self.b.fcmp_unordered("uno", v, v)

    def emit_op(self, n: int, vals: list, in_dtypes: list) -> ir.Value:
        """The value of elementwise node ``n`` from its operands' register values."""
        d = self.g.nx.nodes[n]
        op, attrs = d["op"], d["attrs"]
        out = np.dtype(d["dtype"])
        b = self.b
        name = f"n{n}"
        if op in ("eq", "ne", "lt", "le", "gt", "ge"):
            ct = np.result_type(*in_dtypes)
            x, y = (self.convert(v, s, ct) for v, s in zip(vals, in_dtypes))
            sym = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
            if ct.kind == "f":
                if op == "ne":
                    return b.fcmp_unordered("!=", x, y, name=name)
                return b.fcmp_ordered(sym, x, y, name=name)
            if ct.kind == "b":
                return b.icmp_unsigned(sym, x, y, name=name)
            return b.icmp_signed(sym, x, y, name=name)
        if op in ("logical_and", "logical_or", "logical_not"):
            bs = [self.convert(v, s, np.dtype(bool)) for v, s in zip(vals, in_dtypes)]
            if op == "logical_not":
                return b.xor(bs[0], ir.Constant(I1, 1), name=name)
            return (b.and_ if op == "logical_and" else b.or_)(bs[0], bs[1], name=name)
        if op == "where":
            c = self.convert(vals[0], in_dtypes[0], np.dtype(bool))
            x = self.convert(vals[1], in_dtypes[1], out)
            y = self.convert(vals[2], in_dtypes[2], out)
            return b.select(c, x, y, name=name)
        if op == "cast":
            return self.convert(vals[0], in_dtypes[0], out)
        if op == "fill":
            return _const(out, attrs["value"])
        xs = [self.convert(v, s, out) for v, s in zip(vals, in_dtypes)]
        t = reg_type(out)
        fl = out.kind == "f"
        if op in ("copy", "detach"):
            return xs[0]
        if op == "neg":
            if out.kind == "b":
                raise UnsupportedOpError(f"{describe(self.g, n)}: negation of bools")
            return b.fneg(xs[0], name=name) if fl else b.sub(ir.Constant(t, 0), xs[0], name=name)
        if op in ("sin", "cos"):
            return self._trig(op, t, xs[0])
        if op in ("exp", "log", "tanh", "sigmoid", "sqrt"):
            return self.math(op, t, xs[0])
        if op == "abs":
            if fl:
                return self.math("abs", t, xs[0])
            x = xs[0]
            if out.kind == "b":
                return x
            return b.select(b.icmp_signed("<", x, ir.Constant(t, 0)),
                            b.sub(ir.Constant(t, 0), x), x, name=name)
        if op == "sign":
            # PyTorch's (x > 0) - (x < 0): NaN and -0.0 give +0, a bool is itself
            x = xs[0]
            zero, one, mone = (_const(out, 0), _const(out, 1), _const(out, -1))
            if fl:
                pos, neg = b.fcmp_ordered(">", x, zero), b.fcmp_ordered("<", x, zero)
            else:
                pos, neg = self._icmp(">", x, zero), self._icmp("<", x, zero)
            return b.select(pos, one, b.select(neg, mone, zero), name=name)
        if op == "relu":
            return self._clamp_to(xs[0], "<", _const(out, 0), fl)
        if op == "clamp":
            x = xs[0]
            if attrs["min"] is not None:
                x = self._clamp_to(x, "<", _const(out, attrs["min"]), fl)
            if attrs["max"] is not None:
                x = self._clamp_to(x, ">", _const(out, attrs["max"]), fl)
            return x
        if op == "maximum":
            return self._max(xs[0], xs[1], fl)
        if op == "minimum":
            return self._min(xs[0], xs[1], fl)
        if op in ("add", "sub", "mul"):
            if fl:
                return getattr(b, "f" + op)(xs[0], xs[1], name=name)
            if out.kind == "b":     # bool: add is or, mul is and (sub is refused when traced)
                if op == "add":
                    return b.or_(xs[0], xs[1], name=name)
                if op == "mul":
                    return b.and_(xs[0], xs[1], name=name)
                raise UnsupportedOpError(f"{describe(self.g, n)}: {op} of bools")
            return getattr(b, op)(xs[0], xs[1], name=name)
        if op == "div":
            return b.fdiv(xs[0], xs[1], name=name)
        if op == "pow":
            if fl:
                if not self.g.nx.nodes[d["operands"][1]]["shape"]:
                    return self._scalar_pow(d["operands"][1], xs[0], xs[1], t)
                return self.math("pow", t, xs[0], xs[1])
            if out.kind == "b":                     # x or not y (eager's bool ** bool)
                return b.or_(xs[0], b.xor(xs[1], ir.Constant(I1, 1)), name=name)
            return b.call(self._int_pow_function(t), xs, name=name)
        raise UnsupportedOpError(f"{describe(self.g, n)}: no scalar lowering for {op}")

    def _trig(self, op: str, t, x):
        """sin/cos: the vector code, which is accurate for ``|x| < TRIG_ACCURATE_LIMIT``.  A
        loop kernel that uses them records whether an argument was beyond (``trig_flag``)
        and then runs again with ``trig_exact``: libm's sin/cos (a full argument reduction,
        as numpy's) for those arguments (see ``loop_kernel``)."""
        b = self.b
        fast = self.math(op, t, x)
        big = b.fcmp_ordered(">=", self.math("abs", t, x),
                             ir.Constant(t, vecmath.TRIG_ACCURATE_LIMIT))
        if self.trig_exact:
            wide = x if t == F64 else b.fpext(x, F64)
            exact = b.call(self.module.declare_intrinsic(f"llvm.{op}", [F64]), [wide])
            return b.select(big, exact if t == F64 else b.fptrunc(exact, t), fast)
        if self.trig_flag is not None:
            b.store(b.or_(b.load(self.trig_flag, typ=I8), b.zext(big, I8)), self.trig_flag)
        return fast

    def _scalar_pow(self, yn: int, x, y, t):
        """``x ** y`` for a 0-d exponent node ``yn``, as eager computes it (PyTorch's rule for
        a Python-number exponent): 0.5 is sqrt, -0.5 is 1/sqrt, anything else C's pow.  A
        constant exponent picks its code here; a computed one selects per element."""
        b = self.b
        known = self.plan.scalars.get(yn)
        if known is not None:
            v = float(known)
            if v == 0.5:
                return self.math("sqrt", t, x)
            if v == -0.5:
                return b.fdiv(ir.Constant(t, 1.0), self.math("sqrt", t, x))
            return self.math("pow", t, x, y)
        root = self.math("sqrt", t, x)
        return b.select(b.fcmp_ordered("==", y, ir.Constant(t, 0.5)), root,
                        b.select(b.fcmp_ordered("==", y, ir.Constant(t, -0.5)),
                                 b.fdiv(ir.Constant(t, 1.0), root), self.math("pow", t, x, y)))

    def _int_pow_function(self, t: ir.IntType) -> ir.Function:
        """``graphc_ipow_i<w>(x, y)``: eager's (PyTorch's) integer power -- exact, wrapping
        around like numpy, by squaring; a negative exponent gives 1 for base 1, -1 or 1
        for base -1 (odd or even exponent), else 0."""
        name = f"graphc_ipow_i{t.width}"
        f = self.module.globals.get(name)
        if f is not None:
            return f
        f = ir.Function(self.module, ir.FunctionType(t, [t, t]), name=name)
        f.linkage = "internal"
        f.attributes.add("nounwind")
        x, y = f.args
        x.name, y.name = "base", "exponent"
        blocks = [f.append_basic_block(s) for s in ("entry", "negative", "loop", "step", "done")]
        entry, negative, loop, step, done = blocks
        b = ir.IRBuilder(entry)
        zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
        b.cbranch(b.icmp_signed("<", y, zero), negative, loop)
        b.position_at_end(negative)
        odd = b.trunc(y, I1)
        b.ret(b.select(b.icmp_signed("==", x, one), one, b.select(
            b.icmp_signed("==", x, ir.Constant(t, -1)), b.select(odd, ir.Constant(t, -1), one),
            zero)))
        b.position_at_end(loop)
        r, base, e = b.phi(t, "r"), b.phi(t, "b"), b.phi(t, "e")
        b.cbranch(b.icmp_signed("==", e, zero), done, step)
        b.position_at_end(step)
        r2 = b.select(b.trunc(e, I1), b.mul(r, base), r)
        base2, e2 = b.mul(base, base), b.lshr(e, one)
        b.branch(loop)
        for phi, start, nxt in ((r, one, r2), (base, x, base2), (e, y, e2)):
            phi.add_incoming(start, entry)
            phi.add_incoming(nxt, step)
        b.position_at_end(done)
        b.ret(r)
        return f

    def _icmp(self, op: str, x, y, name: str = ""):
        """Integer comparison: signed, except for bools (i1), where True is 1, not -1."""
        cmp = self.b.icmp_unsigned if x.type == I1 else self.b.icmp_signed
        return cmp(op, x, y, name=name)

    def _clamp_to(self, x, beyond: str, bound, fl):
        """``bound`` where ``x`` is beyond it, else ``x`` -- also on a tie (relu(-0.0) is
        -0.0) and for NaN, as PyTorch's relu and clamp."""
        cmp = self.b.fcmp_ordered(beyond, x, bound) if fl else self._icmp(beyond, x, bound)
        return self.b.select(cmp, bound, x)

    def _max(self, x, y, fl):
        b = self.b
        if fl:   # NaN in either operand propagates, as numpy.maximum
            return b.select(b.or_(b.fcmp_ordered(">", x, y), self.isnan(x)), x, y)
        return b.select(self._icmp(">", x, y), x, y)

    def _min(self, x, y, fl):
        b = self.b
        if fl:
            return b.select(b.or_(b.fcmp_ordered("<", x, y), self.isnan(x)), x, y)
        return b.select(self._icmp("<", x, y), x, y)

    # --- values inside a loop over an index space ----------------------------------------
    # --- loop kernels: elementwise stores + reductions over one space ---------------------
    def loop_kernel(self, kern: Kernel) -> None:
        """The loop nest of ``kern``.  With sin/cos in it, the vectorized loop runs first
        and flags arguments beyond the vector code's accurate range; if one was, the whole
        kernel runs again with exact sin/cos (libm calls: scalar, but only then).  Running
        twice is safe: a kernel writes no buffer it reads -- except in place, where the
        exact version runs alone."""
        g = self.g
        trig = numel(kern.space) and any(
            g.nx.nodes[n]["op"] in ("sin", "cos") for n in self.plan.expr_nodes(
                self.plan.kernel_roots(kern)))
        if not trig:
            self._loop_kernel(kern)
            return
        if self.in_place:
            self.trig_exact = True
            self._loop_kernel(kern)
            return
        b = self.b
        self.trig_flag = self.alloca(I8, name="trig_beyond")
        b.store(ir.Constant(I8, 0), self.trig_flag)
        self._loop_kernel(kern)
        flag, self.trig_flag = self.trig_flag, None
        again = self.fn.append_basic_block("exact_trig")
        done = self.fn.append_basic_block("trig_done")
        b.cbranch(b.icmp_unsigned("!=", b.load(flag, typ=I8), ir.Constant(I8, 0)), again, done)
        b.position_at_end(again)
        self.trig_exact = True
        self._loop_kernel(kern)
        self.trig_exact = False
        b.branch(done)
        b.position_at_end(done)

    def _loop_kernel(self, kern: Kernel) -> None:
        plan, g, b = self.plan, self.g, self.b
        space = kern.space
        if numel(space) == 0:
            self._empty_reductions(kern)
            return
        stores = {n for n, dest in kern.stores if dest == n}
        roots = plan.kernel_roots(kern)
        computed_roots = [r for r in roots if r in stores or
                          (r not in plan.views and r not in plan.scalars)]
        # stride vectors of every access, to merge dims that are contiguous for all of them
        vecs = []
        for n in plan.expr_nodes(computed_roots):
            for o in g.nx.nodes[n]["operands"]:
                if o in plan.views and o not in computed_roots:
                    vecs.append(plan.views[o].broadcast_to(space))
        for r in roots:
            if r not in computed_roots and r in plan.views:
                vecs.append(plan.views[r].broadcast_to(space))
        for n, dest in kern.stores:
            if dest == n and n in plan.copies and plan.copies[n] is not None:
                vecs.append(plan.copies[n].broadcast_to(space))
            elif dest != n and n in plan.views:
                vecs.append(plan.views[n].broadcast_to(space))
        vecs.append(cstrides(space))
        red_out = {}
        full = {}
        for r in kern.reduces:
            axes = g.nx.nodes[r]["attrs"]["axis"]
            keep = tuple(1 if i in axes else s for i, s in enumerate(space))
            # a size-1 dim that is kept indexes only 0: stride 0, so a reduction to one
            # element (a (N, 1) input summed over dim 0) is a full one, whatever its shape
            ost = tuple(0 if k == 1 else st for k, st in zip(keep, cstrides(keep)))
            red_out[r] = ost
            full[r] = all(s == 0 for s in ost)
            vecs.append(ost)
        sizes, merged = _merge_dims(space, vecs)

        def remap(st):
            return merged(st)

        # reduction setup
        accs = {}
        for r in kern.reduces:
            d = g.nx.nodes[r]
            dt = np.dtype(d["dtype"])
            acc_t, ident = _reduce_acc(d["op"], dt)
            if full[r]:
                slot = self.alloca(reg_type(acc_t), name=f"acc_n{r}")
                b.store(ident, slot)
                accs[r] = slot
            else:
                n_out = numel(d["shape"])
                self.loop([n_out], lambda ix, r=r, dt=dt, ident=ident: self.store(
                    r, dt, ix[0], self.convert(ident, _reduce_acc(g.nx.nodes[r]["op"], dt)[0],
                                               dt)), name=f"init_n{r}_")

        def body(idx):
            memo: dict = {}
            # loads through merged views: build per-node access strides lazily
            self._compute_merged(computed_roots, idx, memo, remap, space)
            # every load of the iteration comes before its first store: an output written
            # over an input (plan.inplace) must not be read back by a reduction or another
            # store of the same iteration as if it were that input
            stored = []
            for n, dest in kern.stores:
                dt = np.dtype(g.nx.nodes[n]["dtype"])
                if dest == n and n in plan.copies:
                    src = plan.copies[n]
                    if src is None:
                        v = _const(dt, plan.scalars[n].item())
                    else:
                        v = self.load(src.buf, dt, self.offset(src.offset, remap(
                            src.broadcast_to(space)), idx), name=f"cp_n{n}")
                elif dest == n:
                    v = memo[n]
                else:
                    v = self._merged_leaf(n, idx, memo, remap, space)
                stored.append((dest, dt, v))
            reduced = [self._merged_leaf(g.nx.nodes[r]["operands"][0], idx, memo, remap, space)
                       for r in kern.reduces]
            for dest, dt, v in stored:
                self.store(dest, dt, self.offset(0, remap(cstrides(space)), idx), v)
            for r, v in zip(kern.reduces, reduced):
                d = g.nx.nodes[r]
                src = d["operands"][0]
                sdt = np.dtype(g.nx.nodes[src]["dtype"])
                dt = np.dtype(d["dtype"])
                acc_t, _ = _reduce_acc(d["op"], dt)
                v = self.convert(v, sdt, acc_t)
                if full[r]:
                    cur = b.load(accs[r], typ=reg_type(acc_t))
                    b.store(self._combine(d["op"], cur, v, acc_t), accs[r])
                else:
                    off = self.offset(0, remap(red_out[r]), idx)
                    cur = self.convert(self.load(r, dt, off), dt, acc_t)
                    self.store(r, dt, off, self.convert(self._combine(d["op"], cur, v, acc_t),
                                                        acc_t, dt))

        if self.par is not None:
            self.outer_size = sizes[0]
            self.loop(sizes, body, outer_range=(self.par[0], self.par[1]))
            for k, r in enumerate(kern.reduces):        # all full reductions (see _parallel_ok)
                d = g.nx.nodes[r]
                acc_t, _ = _reduce_acc(d["op"], np.dtype(d["dtype"]))
                v = b.load(accs[r], typ=reg_type(acc_t))
                if acc_t.kind == "f":
                    v = b.bitcast(v, I64)            # 8-byte slots (see _parallel_ok)
                b.store(v, b.gep(self.par[2], [ir.Constant(I64, k)], source_etype=I64))
            self.kern = kern
            return
        self.loop(sizes, body)
        # reduction epilogues: write full accumulators, scale means
        for r in kern.reduces:
            d = g.nx.nodes[r]
            dt = np.dtype(d["dtype"])
            acc_t, _ = _reduce_acc(d["op"], dt)
            count = numel(g.nx.nodes[d["operands"][0]]["shape"]) // max(numel(d["shape"]), 1)
            if full[r]:
                v = b.load(accs[r], typ=reg_type(acc_t))
                if d["op"] == "mean":
                    v = b.fmul(v, ir.Constant(reg_type(acc_t), 1.0 / count if count else
                                              float("nan")))
                self.store(r, dt, ir.Constant(I64, 0), self.convert(v, acc_t, dt))
            elif d["op"] == "mean":
                scale = ir.Constant(reg_type(dt), 1.0 / count if count else float("nan"))
                self.loop([numel(d["shape"])], lambda ix, r=r, dt=dt, scale=scale: self.store(
                    r, dt, ix[0], b.fmul(self.load(r, dt, ix[0]), scale)), name=f"mean_n{r}_")

    def combine_partials(self, b, fn, partials, nt, nred: int, data, arena, i: int) -> None:
        """In the entry: fold per-thread partial reductions (thread order) into outputs."""
        g = self.g
        low = self.low
        for k, r in enumerate(self.kern.reduces):
            d = g.nx.nodes[r]
            dt = np.dtype(d["dtype"])
            acc_t, _ = _reduce_acc(d["op"], dt)
            at = reg_type(acc_t)

            def load_part(t):
                p = b.gep(partials, [b.add(b.mul(t, ir.Constant(I64, nred)),
                                           ir.Constant(I64, k))], source_etype=I64)
                v = b.load(p, typ=I64)
                return b.bitcast(v, at) if acc_t.kind == "f" else v

            acc = b.alloca(at, name=f"comb_n{r}")
            b.store(load_part(ir.Constant(I64, 0)), acc)
            saved = self.b
            self.b = b                            # _combine emits through self.b
            counted_loop(b, fn, ir.Constant(I64, 1), nt, lambda t: b.store(
                self._combine(d["op"], b.load(acc, typ=at), load_part(t), acc_t), acc),
                f"k{i}_comb{k}")
            self.b = saved
            v = b.load(acc, typ=at)
            count = numel(g.nx.nodes[d["operands"][0]]["shape"])
            if d["op"] == "mean":
                v = b.fmul(v, ir.Constant(at, 1.0 / count if count else float("nan")))
            saved = self.b
            self.b = b
            v = self.convert(v, acc_t, dt)
            self.b = saved
            base = low._base(b, r, data, arena)
            if dt.kind == "b":
                v = b.zext(v, I8)
            b.store(v, b.gep(base, [ir.Constant(I64, 0)], source_etype=mem_type(dt)))

    # merged-dimension variants of leaf loads (strides remapped onto the merged loop dims)
    def _merged_leaf(self, o, idx, memo, remap, space):
        if o in memo:
            return memo[o]
        plan = self.plan
        dt = np.dtype(self.g.nx.nodes[o]["dtype"])
        if o in plan.scalars:
            v = _const(dt, plan.scalars[o].item())
        else:
            view = plan.views[o]
            v = self.load(view.buf, dt, self.offset(view.offset, remap(view.broadcast_to(space)),
                                                    idx), name=f"ld_n{o}")
        memo[o] = v
        return v

    def _compute_merged(self, roots, idx, memo, remap, space):
        plan = self.plan
        roots_set = set(roots)
        for n in plan.expr_nodes(roots):
            d = self.g.nx.nodes[n]
            vals, dts = [], []
            for o in d["operands"]:
                if o in memo:
                    vals.append(memo[o])
                else:
                    vals.append(self._merged_leaf(o, idx, memo, remap, space))
                dts.append(np.dtype(self.g.nx.nodes[o]["dtype"]))
            memo[n] = self.emit_op(n, vals, dts)
        return roots_set

    def _combine(self, op, cur, v, acc_t):
        b = self.b
        op = _REDUCE_AS.get(op, op)
        fl = acc_t.kind == "f"
        if op in ("sum", "mean"):
            if fl:
                return b.fadd(cur, v, flags=("reassoc",))
            return b.add(cur, v)
        if op == "max":
            if fl:
                return b.select(b.or_(b.fcmp_ordered(">", v, cur), self.isnan(v)), v, cur)
            return b.select(self._icmp(">", v, cur), v, cur)
        if op == "min":
            if fl:
                return b.select(b.or_(b.fcmp_ordered("<", v, cur), self.isnan(v)), v, cur)
            return b.select(self._icmp("<", v, cur), v, cur)
        if op == "all":
            return b.and_(cur, v)
        if op == "any":
            return b.or_(cur, v)
        raise AssertionError(op)

    def _empty_reductions(self, kern: Kernel) -> None:
        """Reductions over an empty space: the identity (sum 0, mean nan, all True, any False);
        max and min have none, so only their empty results (over non-empty dims) get here
        (the shape rule refuses the others while tracing, with PyTorch's error)."""
        g = self.g
        for r in kern.reduces:
            d = g.nx.nodes[r]
            dt = np.dtype(d["dtype"])
            if not numel(d["shape"]):
                continue                               # an empty result: nothing to write
            if _REDUCE_AS.get(d["op"], d["op"]) in ("max", "min"):
                raise UnsupportedOpError(f"internal error: {describe(g, r)}: {d['op']} over a "
                                         "zero-size dim reached the backend")
            acc_t, ident = _reduce_acc(d["op"], dt)
            v = self.convert(ident, acc_t, dt)
            if d["op"] == "mean":
                v = _const(dt, float("nan"))
            self.loop([numel(d["shape"])], lambda ix, r=r, dt=dt, v=v: self.store(r, dt, ix[0], v),
                      name=f"empty_n{r}_")

    # --- matmul -----------------------------------------------------------------------
    def matmul_kernel(self, n: int) -> None:
        plan, g, b = self.plan, self.g, self.b
        d = g.nx.nodes[n]
        a_id, b_id = d["operands"]
        dt = np.dtype(d["dtype"])
        adt, bdt = np.dtype(g.nx.nodes[a_id]["dtype"]), np.dtype(g.nx.nodes[b_id]["dtype"])
        gd = gemm_dims(plan, n)
        va, vb, batch, M, K, N = gd.va, gd.vb, gd.batch, gd.M, gd.K, gd.N
        ast = va.broadcast_to(batch + (M, K))[:-2] if batch else ()
        bst = vb.broadcast_to(batch + (K, N))[:-2] if batch else ()
        cst = cstrides(batch + (M, N))[:-2] if batch else ()
        if numel(batch + (M, N)) == 0:
            return
        if not gd.blas:
            # plain loops: integer/bool/mixed matmuls, K == 0, no BLAS library installed, or
            # a dimension beyond the 32-bit ints of the cblas interface
            self._matmul_loops(n, va, vb, batch, M, K, N, dt, adt, bdt)
            return
        gemm = blas.declare_gemm(self.module, dt)
        ft = reg_type(dt)
        ta, lda = _blas_operand(va)
        tb, ldb = _blas_operand(vb)
        c32 = lambda v: ir.Constant(I32, v)  # noqa: E731
        i64 = lambda v: ir.Constant(I64, v)  # noqa: E731
        rows, cols = i64(M), i64(N)
        row_a, row_c = i64(0), i64(0)         # element offsets of the first row / column
        col_b, col_c = i64(0), i64(0)
        if self.par is not None:
            # a thread's share of the product: rows [lo, hi) of C (of op(A)), or columns
            # [lo, hi) of C (of op(B)); BLAS runs single-threaded inside each share
            lo, hi = self.par[0], self.par[1]
            self.outer_size = gd.split_size
            if gd.split == "rows":
                rows = b.sub(hi, lo)
                row_a = b.mul(lo, i64(lda if ta == blas.CBLAS_NO_TRANS else 1))
                row_c = b.mul(lo, i64(max(N, 1)))
            else:
                cols = b.sub(hi, lo)
                col_b = b.mul(lo, i64(1 if tb == blas.CBLAS_NO_TRANS else ldb))
                col_c = lo

        def call(idx):
            oa = b.add(self.offset(va.offset, ast, idx), row_a)
            ob = b.add(self.offset(vb.offset, bst, idx), col_b)
            oc = b.add(b.add(self.offset(0, cst, idx), row_c), col_c)
            pa = self.ptr(va.buf, dt, oa)
            pb = self.ptr(vb.buf, dt, ob)
            pc = self.ptr(n, dt, oc)
            b.call(gemm, [c32(blas.CBLAS_ROW_MAJOR), c32(ta), c32(tb), b.trunc(rows, I32),
                          b.trunc(cols, I32), c32(K), ir.Constant(ft, 1.0), pa, c32(lda), pb,
                          c32(ldb), ir.Constant(ft, 0.0), pc, c32(max(N, 1))])

        if batch:
            self.loop(list(batch), call, name="batch")
        else:
            call([])

    def _matmul_loops(self, n, va, vb, batch, M, K, N, dt, adt, bdt):
        """Plain loops for integer/bool matmul and K == 0 (BLAS is float only)."""
        b = self.b
        acc_t = dt
        slot = self.alloca(reg_type(acc_t), name="dot")
        ast = va.broadcast_to(batch + (M, K))
        bst = vb.broadcast_to(batch + (K, N))
        cst = cstrides(batch + (M, N))
        nb = len(batch)

        def outer(idx):
            b.store(_const(acc_t, 0), slot)

            def inner(kk):
                k = kk[0]
                ia = idx[:nb] + [idx[nb], k]
                ib = idx[:nb] + [k, idx[nb + 1]]
                x = self.convert(self.load(va.buf, adt, self.offset(va.offset, ast, ia)), adt,
                                 acc_t)
                y = self.convert(self.load(vb.buf, bdt, self.offset(vb.offset, bst, ib)), bdt,
                                 acc_t)
                cur = b.load(slot, typ=reg_type(acc_t))
                if acc_t.kind == "f":
                    b.store(b.fadd(cur, b.fmul(x, y)), slot)
                elif acc_t.kind == "b":
                    b.store(b.or_(cur, b.and_(x, y)), slot)
                else:
                    b.store(b.add(cur, b.mul(x, y)), slot)

            self.loop([K], inner, name="k")
            self.store(n, dt, self.offset(0, cst, idx), b.load(slot, typ=reg_type(acc_t)))

        self.loop(list(batch) + [M, N], outer, name="mn")

    # --- random draws ------------------------------------------------------------------
    def philox_kernel(self, n: int) -> None:
        """Element i of a ``philox`` node: Philox 4x32-10 of counter ``counter + offset + i``
        and the state's key (eager/ops/random.py says how words become numbers).  Straight
        integer code per element, so LLVM vectorizes the loop; a pure function of i, so
        any split among threads gives the same numbers."""
        b, g = self.b, self.g
        d = g.nx.nodes[n]
        a = d["attrs"]
        dt = np.dtype(d["dtype"])
        total = numel(d["shape"])
        if total == 0:
            return
        sv = self.plan.views[d["operands"][0]]
        i64t = np.dtype(np.int64)
        key = self.load(sv.buf, i64t, ir.Constant(I64, sv.offset), name="key")
        base = self.load(sv.buf, i64t, ir.Constant(I64, sv.offset + sv.strides[0]),
                         name="counter")
        off = int(a["offset"]) % 2 ** 64
        base = b.add(base, ir.Constant(I64, off - 2 ** 64 if off >= 2 ** 63 else off))
        k0, k1 = b.trunc(key, I32), b.trunc(b.lshr(key, ir.Constant(I64, 32)), I32)
        def c64(v: int) -> ir.Constant:        # two's complement: bits, not a value
            v %= 2 ** 64
            return ir.Constant(I64, v - 2 ** 64 if v >= 2 ** 63 else v)

        def c32(v: int) -> ir.Constant:
            v %= 2 ** 32
            return ir.Constant(I32, v - 2 ** 32 if v >= 2 ** 31 else v)

        def u64(lo, hi):              # a float64 in [0, 1) from 27 + 26 bits of two words
            x = b.uitofp(b.lshr(lo, c32(5)), F64)
            y = b.uitofp(b.lshr(hi, c32(6)), F64)
            return b.fmul(b.fadd(b.fmul(x, ir.Constant(F64, 67108864.0)), y),
                          ir.Constant(F64, 2.0 ** -53))

        def body(idx):
            ctr = b.add(base, idx[0])
            w = [b.trunc(ctr, I32), b.trunc(b.lshr(ctr, c64(32)), I32), c32(0), c32(0)]
            kk = [k0, k1]
            for r in range(random_op.ROUNDS):
                p0 = b.mul(b.zext(w[0], I64), c64(random_op.M0))
                p1 = b.mul(b.zext(w[2], I64), c64(random_op.M1))
                w = [b.xor(b.xor(b.trunc(b.lshr(p1, c64(32)), I32), w[1]), kk[0]),
                     b.trunc(p1, I32),
                     b.xor(b.xor(b.trunc(b.lshr(p0, c64(32)), I32), w[3]), kk[1]),
                     b.trunc(p0, I32)]
                if r + 1 < random_op.ROUNDS:
                    kk = [b.add(kk[0], c32(random_op.W0)), b.add(kk[1], c32(random_op.W1))]
            dist = a["dist"]
            if dist == "uniform" and dt == np.float32:
                v = b.fmul(b.uitofp(b.lshr(w[0], c32(8)), F32), ir.Constant(F32, 2.0 ** -24))
            elif dist == "uniform":
                v = u64(w[0], w[1])
            elif dist == "normal":
                u1 = b.fsub(ir.Constant(F64, 1.0), u64(w[0], w[1]))
                u2 = u64(w[2], w[3])
                rad = self.math("sqrt", F64, b.fmul(ir.Constant(F64, -2.0),
                                                    self.math("log", F64, u1)))
                ang = b.fmul(ir.Constant(F64, 2.0 * np.pi), u2)
                v = b.fmul(rad, self.math("cos", F64, ang))
                if dt == np.float32:
                    v = b.fptrunc(v, F32)
            else:
                bits = b.or_(b.zext(w[0], I64), b.shl(b.zext(w[1], I64), c64(32)))
                v = b.add(b.urem(bits, c64(int(a["high"]) - int(a["low"]))), c64(int(a["low"])))
                if dt == np.int32:
                    v = b.trunc(v, I32)
            self.store(n, dt, idx[0], v)

        if self.par is not None:
            self.outer_size = total
            self.loop([total], body, name="r", outer_range=(self.par[0], self.par[1]))
        else:
            self.loop([total], body, name="r")

    # --- argmax / argmin ------------------------------------------------------------------
    def argreduce_kernel(self, n: int) -> None:
        plan, g, b = self.plan, self.g, self.b
        d = g.nx.nodes[n]
        src = d["operands"][0]
        v = plan.views[src]
        sdt = np.dtype(g.nx.nodes[src]["dtype"])
        axis = d["attrs"]["axis"]
        shape = v.shape
        if not shape:
            self.store(n, np.dtype(np.int64), ir.Constant(I64, 0), ir.Constant(I64, 0))
            return
        if not numel(d["shape"]):
            return                                     # an empty result: nothing to write
        if shape[axis] == 0:
            raise UnsupportedOpError(f"internal error: {describe(g, n)}: {d['op']} over a "
                                     "zero-size dim reached the backend")
        outer_sizes = [s for i, s in enumerate(shape) if i != axis]
        outer_st = [st for i, st in enumerate(v.strides) if i != axis]
        ost = cstrides(tuple(outer_sizes))
        best = self.alloca(reg_type(sdt), name="best")
        besti = self.alloca(I64, name="best_i")
        is_max = d["op"] == "argmax"
        fl = sdt.kind == "f"

        def outer(idx):
            base = self.offset(v.offset, outer_st, idx)
            b.store(self.load(v.buf, sdt, base), best)
            b.store(ir.Constant(I64, 0), besti)

            def inner(kk):
                k = b.add(kk[0], ir.Constant(I64, 1))
                off = b.add(base, b.mul(k, ir.Constant(I64, v.strides[axis])))
                x = self.load(v.buf, sdt, off)
                cur = b.load(best, typ=reg_type(sdt))
                if fl:
                    better = (b.fcmp_ordered(">", x, cur) if is_max else
                              b.fcmp_ordered("<", x, cur))
                    better = b.and_(b.or_(better, self.isnan(x)),
                                    b.fcmp_ordered("ord", cur, cur))
                elif sdt.kind == "b":
                    better = b.icmp_unsigned(">" if is_max else "<", x, cur)
                else:
                    better = b.icmp_signed(">" if is_max else "<", x, cur)
                b.store(b.select(better, x, cur), best)
                b.store(b.select(better, k, b.load(besti, typ=I64)), besti)

            self.loop([shape[axis] - 1], inner, name="k")
            self.store(n, np.dtype(np.int64), self.offset(0, ost, idx), b.load(besti, typ=I64))

        self.loop(outer_sizes, outer, name="o")

    # --- advanced indexing (integer index tensors, integers beside them) -------------------
    def _index_value(self, iv: View, idt: np.dtype, idx_part, length: int):
        """Load an index, wrap negatives, and flag out-of-range (sets rc = 3)."""
        b = self.b
        if iv is None:
            j = idx_part
        else:
            j = self.convert(self.load(iv.buf, idt, self.offset(iv.offset, iv.strides, idx_part)),
                             idt, np.dtype(np.int64))
        j = b.select(b.icmp_signed("<", j, ir.Constant(I64, 0)),
                     b.add(j, ir.Constant(I64, length)), j)
        bad = b.or_(b.icmp_signed("<", j, ir.Constant(I64, 0)),
                    b.icmp_signed(">=", j, ir.Constant(I64, length)))
        b.store(b.select(bad, ir.Constant(I32, RC_INDEX), b.load(self.rc, typ=I32)), self.rc)
        return b.select(bad, ir.Constant(I64, 0), j)       # never address out of bounds

    def _gather(self, n: int, src: View, first_index_operand: int) -> Gather:
        d = self.g.nx.nodes[n]
        tens = d["operands"][first_index_operand:]
        for t in tens:
            if np.dtype(self.g.nx.nodes[t]["dtype"]).kind == "b":
                raise UnsupportedOpError(f"{describe(self.g, n)}: boolean index tensors are not "
                                         "supported by the native backend here; use "
                                         "graphc.where(mask, value, x)")
        return Gather(src, d["attrs"]["index"], [tuple(self.g.nx.nodes[t]["shape"])
                                                 for t in tens]), tens

    def _gather_loop(self, n, src: View, first: int, fn) -> tuple:
        """Loop over the advanced-indexing result shape; fn(idx, source offset)."""
        gat, tens = self._gather(n, src, first)
        views = [(self.plan.views[tens[k]], np.dtype(self.g.nx.nodes[tens[k]]["dtype"]))
                 if k is not None else (None, None) for _, k, _ in gat.adv]
        nb = len(gat.bshape)
        st = gat.view.strides

        def body(idx):
            bidx = idx[gat.bpos:gat.bpos + nb]
            basic = idx[:gat.bpos] + idx[gat.bpos + nb:]
            off = self.offset(gat.view.offset, [st[d] for d in gat.basic_dims], basic)
            for (dim, k, const), (iv, idt) in zip(gat.adv, views):
                length = gat.view.shape[dim]
                if iv is None:
                    j = self._index_value(None, None, ir.Constant(I64, const), length)
                else:
                    bst = iv.broadcast_to(gat.bshape)
                    j = self._index_value(View(iv.buf, iv.offset, bst, gat.bshape), idt, bidx,
                                          length)
                off = self.b.add(off, self.b.mul(j, ir.Constant(I64, st[dim])))
            fn(idx, off)

        self.loop(list(gat.out_shape), body)
        return gat

    def getitem_kernel(self, n: int) -> None:
        d = self.g.nx.nodes[n]
        x = d["operands"][0]
        dt = np.dtype(d["dtype"])
        oc = cstrides(tuple(d["shape"]))
        xv = self.plan.views[x]
        self._gather_loop(n, xv, 1, lambda idx, off: self.store(
            n, dt, self.offset(0, oc, idx), self.load(xv.buf, dt, off)))

    def getitem_grad_kernel(self, n: int) -> None:
        d = self.g.nx.nodes[n]
        gsrc = d["operands"][0]
        dt = np.dtype(d["dtype"])
        shape = tuple(d["shape"])
        self.loop([numel(shape)], lambda ix: self.store(n, dt, ix[0], _const(dt, 0)), name="z")
        gv = self.plan.views[gsrc]
        gdt = np.dtype(self.g.nx.nodes[gsrc]["dtype"])
        own = View(n, 0, cstrides(shape), shape)
        index = d["attrs"]["index"]
        if len(d["operands"]) == 1:
            bv = index_view(own, index)
            gst = gv.broadcast_to(bv.shape)
            self.loop(list(bv.shape), lambda idx: self.store(
                n, dt, self.offset(bv.offset, bv.strides, idx),
                self.convert(self.load(gv.buf, gdt, self.offset(gv.offset, gst, idx)), gdt, dt)))
            return
        b = self.b

        def acc(idx, off):       # repeated indices accumulate, as numpy.add.at
            gst = gv.broadcast_to(tuple(d_ for d_ in gv.shape))
            v = self.convert(self.load(gv.buf, gdt, self.offset(gv.offset, gst, idx)), gdt, dt)
            cur = self.load(n, dt, off)
            self.store(n, dt, off, b.fadd(cur, v) if dt.kind == "f" else
                       b.or_(cur, v) if dt.kind == "b" else b.add(cur, v))

        self._gather_loop(n, own, 1, acc)

    def setitem_kernel(self, n: int) -> None:
        d = self.g.nx.nodes[n]
        x, v = d["operands"][:2]
        dt = np.dtype(d["dtype"])
        shape = tuple(d["shape"])
        xv, vv = self.plan.views[x], self.plan.views[v]
        vdt = np.dtype(self.g.nx.nodes[v]["dtype"])
        oc = cstrides(shape)
        index = d["attrs"]["index"]
        tens = d["operands"][2:]
        if len(tens) == 1 and index == (("t", 0),) and \
                np.dtype(self.g.nx.nodes[tens[0]]["dtype"]).kind == "b" and \
                tuple(self.g.nx.nodes[tens[0]]["shape"]) == shape and numel(vv.shape) == 1:
            mv = self.plan.views[tens[0]]          # x[mask] = scalar: a select per element
            b = self.b
            self.loop(list(shape), lambda idx: self.store(n, dt, self.offset(0, oc, idx), b.select(
                self.load(mv.buf, np.dtype(bool), self.offset(mv.offset, mv.strides, idx)),
                self.convert(self.load(vv.buf, vdt, ir.Constant(I64, vv.offset)), vdt, dt),
                self.load(xv.buf, dt, self.offset(xv.offset, xv.strides, idx)))), name="m")
            return
        self.loop(list(shape), lambda idx: self.store(
            n, dt, self.offset(0, oc, idx),
            self.load(xv.buf, dt, self.offset(xv.offset, xv.strides, idx))), name="cp")
        own = View(n, 0, oc, shape)
        if not tens:
            bv = index_view(own, index)
            vst = vv.broadcast_to(bv.shape)
            self.loop(list(bv.shape), lambda idx: self.store(
                n, dt, self.offset(bv.offset, bv.strides, idx),
                self.convert(self.load(vv.buf, vdt, self.offset(vv.offset, vst, idx)), vdt, dt)))
            return
        gat, _ = self._gather(n, own, 2)
        vst = vv.broadcast_to(gat.out_shape)
        self._gather_loop(n, own, 2, lambda idx, off: self.store(
            n, dt, off, self.convert(self.load(vv.buf, vdt, self.offset(vv.offset, vst, idx)),
                                     vdt, dt)))


class GemmDims:
    """How a matmul node runs: its operands as matrix views, batch and M, K, N; whether
    BLAS computes it, and how threads would share it (by rows or columns of C)."""

    __slots__ = ("va", "vb", "batch", "M", "K", "N", "blas", "split", "split_size")

    def __init__(self, plan: Plan, n: int) -> None:
        g = plan.g
        d = g.nx.nodes[n]
        a_id, b_id = d["operands"]
        dt = np.dtype(d["dtype"])
        adt, bdt = np.dtype(g.nx.nodes[a_id]["dtype"]), np.dtype(g.nx.nodes[b_id]["dtype"])
        va, vb = as_matrix(plan.views[a_id], 0), as_matrix(plan.views[b_id], 1)
        self.va, self.vb = va, vb
        self.M, self.K, self.N = va.shape[-2], va.shape[-1], vb.shape[-1]
        self.batch = tuple(np.broadcast_shapes(va.shape[:-2], vb.shape[:-2]))
        self.blas = (self.K != 0 and dt.kind == "f" and adt == dt and bdt == dt and
                     blas.available() and _blas_fits(va, vb, self.M, self.N, self.K))
        # threads share rows of C (each reads its rows of A and all of B, which BLAS packs
        # once per share), or columns when C has too few rows to go round: measured on a
        # 64x1000 @ 1000x100 product, rows took 65 us on two threads, columns 87 us
        self.split = "rows" if self.M >= min(self.N, 16) else "cols"
        self.split_size = self.M if self.split == "rows" else self.N


def gemm_dims(plan: Plan, n: int) -> GemmDims:
    return GemmDims(plan, n)


def parallel_ok(plan: Plan, kern: Kernel) -> bool:
    """Split this kernel across threads?  Big loop kernels whose reductions are all full
    reductions with 8-byte accumulators (sums, f64/i64 max/min), and matrix products
    with at least ``GEMM_PARALLEL_MIN`` multiply-adds (rows or columns of the result
    shared out, BLAS single-threaded in each share: one pool runs loops and products)."""
    if kern.kind == "matmul":
        gd = gemm_dims(plan, kern.node)
        return (gd.blas and gd.split_size >= 2 and
                numel(gd.batch + (gd.M, gd.K, gd.N)) >= GEMM_PARALLEL_MIN)
    if kern.kind == "philox":
        return numel(kern.space) >= PARALLEL_MIN
    if kern.kind != "loop" or numel(kern.space) < PARALLEL_MIN or not kern.space:
        return False
    for r in kern.reduces:
        d = plan.g.nx.nodes[r]
        if numel(d["shape"]) != 1:
            return False
        acc, _ = _reduce_acc(d["op"], np.dtype(d["dtype"]))
        if acc.itemsize != 8:
            return False
    return True


def canonical(plan: Plan, buf):
    """An output written over an input (in place) is that input's buffer."""
    spec = plan.buffers.get(buf) if not isinstance(buf, tuple) else None
    if spec is not None and spec[0] == "out" and spec[1] in plan.inplace:
        return ("in", plan.inplace[spec[1]])
    return buf


def _loop_views(plan: Plan, kern: Kernel) -> list:
    """Every view a loop kernel reads (its leaves, copies and stored views)."""
    g = plan.g
    roots = plan.kernel_roots(kern)
    out = []
    for n in plan.expr_nodes(roots):
        for o in g.nx.nodes[n]["operands"]:
            if o in plan.views:
                out.append(plan.views[o])
    for r in roots:
        if r in plan.views:
            out.append(plan.views[r])
    for n, dest in kern.stores:
        if n in plan.copies and plan.copies[n] is not None:
            out.append(plan.copies[n])
        if n in plan.views:
            out.append(plan.views[n])
    return out


def epilogues(plan: Plan) -> dict:
    """{product kernel i: loop kernel i + 1} for loops that run inside the product's
    thread shares: a parallel 2-D product shared by rows, followed by a loop over the
    same (M, N) space without reductions that reads the product only elementwise (row r
    of the loop reads row r of the product) and writes nothing the product reads or
    writes.  Each thread then updates the rows it just computed, while they are in its
    core's cache: measured on the seed MLP's step, the SGD update after a product shared
    by two threads ran ~3x slower on one thread than the product's own shares take."""
    out = {}
    ks = plan.kernels
    for i in range(len(ks) - 1):
        k, nxt = ks[i], ks[i + 1]
        if k.kind != "matmul" or nxt.kind != "loop" or nxt.reduces or \
                not parallel_ok(plan, k):
            continue
        gd = gemm_dims(plan, k.node)
        if gd.batch or gd.split != "rows" or nxt.space != (gd.M, gd.N):
            continue
        mine = {canonical(plan, b) for b in k.writes}
        theirs = {canonical(plan, b) for b in k.reads} | mine
        if any(canonical(plan, b) in theirs for b in nxt.writes):
            continue
        ok = True
        for v in _loop_views(plan, nxt):
            if canonical(plan, v.buf) in mine and (v.offset != 0 or v.broadcast_to(nxt.space) !=
                                  cstrides(nxt.space) or gd.N == 0):
                ok = False
                break
        if ok:
            out[i] = i + 1
    return out


def needs_pool(plan: Plan) -> bool:
    """Does the code for ``plan`` call the worker pool (``POOL_RUN``)?  Then the pool must
    be registered (``graphc.runtime.pool.ensure()``) before the code is loaded."""
    return any(parallel_ok(plan, k) for k in plan.kernels)


def releases_gil(plan: Plan) -> bool:
    """Does the entry point release the GIL while its kernels run?  Only for graphs whose
    kernels cover more than ``GIL_FREE_MIN`` elements: for small ones, releasing and
    taking it back again costs more than it lets other threads do."""
    return sum(numel(k.space) for k in plan.kernels) > GIL_FREE_MIN


def counted_loop(b: ir.IRBuilder, fn: ir.Function, start, stop, body, name: str) -> None:
    """``for t in range(start, stop): body(t)`` with runtime bounds, in the entry point.
    ``body`` may branch, as long as it leaves ``b`` in a block that falls through."""
    slot = b.alloca(I64, name=f"{name}_t")
    b.store(start, slot)
    cond = fn.append_basic_block(f"{name}_cond")
    blk = fn.append_basic_block(name)
    done = fn.append_basic_block(f"{name}_done")
    b.branch(cond)
    b.position_at_end(cond)
    t = b.load(slot, typ=I64)
    b.cbranch(b.icmp_signed("<", t, stop), blk, done)
    b.position_at_end(blk)
    body(t)
    b.store(b.add(t, ir.Constant(I64, 1)), slot)
    b.branch(cond)
    b.position_at_end(done)


# reductions computed as another: max(dim)'s values are max's (only their VJPs differ)
_REDUCE_AS = {"max_dim": "max", "min_dim": "min"}


def _reduce_acc(op: str, dt: np.dtype):
    """(accumulator dtype, identity constant) of a reduction."""
    op = _REDUCE_AS.get(op, op)
    if op in ("all", "any"):
        return np.dtype(bool), ir.Constant(I1, 1 if op == "all" else 0)
    if op in ("sum", "mean"):
        acc = np.dtype(np.float64) if dt.kind == "f" else np.dtype(np.int64)
        return acc, _const(acc, 0)
    if dt.kind == "f":
        return dt, _const(dt, float("-inf") if op == "max" else float("inf"))
    info = np.iinfo(dt) if dt.kind in "iu" else None
    if info is None:
        return dt, _const(dt, 0 if op == "max" else 1)
    return dt, _const(dt, info.min if op == "max" else info.max)


def _merge_dims(space: tuple, vecs: list):
    """Merge adjacent loop dims that are contiguous for every access; returns (sizes, remap)."""
    groups = [[i] for i in range(len(space))]
    k = len(groups) - 1
    while k > 0:
        if all(_contig(v, space, groups[k - 1][-1], groups[k]) for v in vecs):
            groups[k - 1] = groups[k - 1] + groups[k]
            groups.pop(k)
        k -= 1
    sizes = [_group_size(space, grp) for grp in groups]

    def remap(st: tuple) -> tuple:
        return tuple(st[grp[-1]] for grp in groups)

    return sizes, remap


def _group_size(space, grp) -> int:
    n = 1
    for i in grp:
        n *= space[i]
    return n


def _contig(v, space, a: int, grp: list) -> bool:
    """Is dim ``a`` followed by the (already merged) dims ``grp`` one linear run in ``v``?"""
    return v[a] == v[grp[-1]] * _group_size(space, grp) and all(
        v[grp[j]] == v[grp[j + 1]] * space[grp[j + 1]] for j in range(len(grp) - 1))


def _blas_fits(va: View, vb: View, M: int, N: int, K: int) -> bool:
    """Do the dimensions and leading dimensions fit cblas's 32-bit ints?"""
    lds = [max(blas_layout(v)[1], 1) for v in (va, vb)]
    return max([M, N, K] + lds) <= np.iinfo(np.int32).max


def _blas_operand(v: View) -> tuple:
    """(CBLAS transpose flag, leading dimension) for a matrix view the planner accepted."""
    layout = blas_layout(v)
    if layout is None:
        raise UnsupportedOpError(f"internal error: matrix view with strides {v.strides} "
                                 "reached BLAS")
    trans, ld = layout
    return (blas.CBLAS_TRANS if trans else blas.CBLAS_NO_TRANS), max(ld, 1)


def lower(plan: Plan, name: str) -> ir.Module:
    """The LLVM module for a plan (see the module docstring for the calling convention)."""
    return Lowerer(plan, name).build()
