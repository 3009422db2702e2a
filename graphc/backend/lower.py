"""Lowering a scheduled graph (graphc.backend.schedule.Schedule) to one LLVM module.

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

import os
from typing import Optional

import numpy as np
from llvmlite import ir

from ..errors import GraphcError, LoweringError, UnsupportedOpError, with_context
from ..ir import Graph, describe, printable

from . import irtext, loops, lowering
from .dedup import share_identical
from .llvmir import no_unroll_loop_id
from .parts import run_in_parts, split as split_into_parts
from .abi import (
    CHUNKS_PER_THREAD,
    CHUNK_FN,
    DATA_OFFSET,
    ENTRY,
    FLAGS_OFFSET,
    I1,
    I32,
    I64,
    I8,
    MAX_CHUNKS,
    MAX_THREADS,
    NPY_ALIGNED,
    NPY_C_CONTIGUOUS,
    NPY_WRITEABLE,
    NUM_THREADS,
    OB_SIZE_OFFSET,
    OB_TYPE_OFFSET,
    POOL_RUN,
    POOL_RUN_FN,
    PTR,
    PY_SYMBOLS,
    RC_ARGS,
    RC_INDEX,
    RC_LAYOUT,
    RC_NOMEM,
    RC_TYPE,
    TUPLE_ITEMS_OFFSET,
)
from .kernel_builder import KernelBuilder
from .parallel_policy import canonical, epilogues, parallel_ok, releases_gil
from .schedule import Kernel, Schedule, numel


class Lowerer:
    """Builds the LLVM module for a Schedule."""

    def __init__(
        self, plan: Schedule, name: str, module: Optional[ir.Module] = None, prefix: str = ""
    ) -> None:
        self.plan = plan
        self.g: Graph = plan.g
        # a loop's body is lowered by a Lowerer of its own into the same module, its
        # functions' names prefixed by the loop kernel's (``k3_body_k0_loop``)
        self.module = irtext.module(name) if module is None else module
        self.prefix = prefix
        self.globals: dict = {}
        self._malloc = None
        self._free = None
        self.n_in = len(self.g.inputs)
        self.n_out = len(self.g.outputs)
        self.current_node: Optional[int] = None  # the node being lowered (error context)
        # opt-in per-kernel timing (GRAPHC_PROFILE, graphc.runtime.native): the address of
        # an int64 array [ns per kernel..., calls per kernel...] and of clock_gettime
        self.profile: Optional[tuple] = None

    # --- entry point ------------------------------------------------------------
    def build(self) -> ir.Module:
        # the entry's blocks are emitted in their order here, each step by a method below
        plan = self.plan
        self.builders: dict = {}
        self.epilogues = epilogues(plan)
        kfns = [self._kernel_function(i, k) for i, k in enumerate(plan.kernels)]
        kfns = share_identical(self.module, kfns)  # one function per distinct body
        fnty = ir.FunctionType(PTR, [PTR, PTR])
        fn = ir.Function(self.module, fnty, name=ENTRY)
        self_arg, args_tuple = fn.args
        self_arg.name, args_tuple.name = "self", "arrays"
        entry = fn.append_basic_block("entry")
        b = ir.IRBuilder(entry)
        irtext.comment(
            b,
            f"graph {self.g.name}: {self.n_in} inputs, {self.n_out} outputs, "
            f"{len(plan.kernels)} kernels, arena {plan.arena_bytes} bytes",
        )
        b.comment(
            f"arrays: a tuple of {self.n_in} numpy arrays (type at +{OB_TYPE_OFFSET}, "
            f"size at +{OB_SIZE_OFFSET}, items at +{TUPLE_ITEMS_OFFSET}); each item's "
            f"type exactly ndarray, then its data pointer at +{DATA_OFFSET}, flags at "
            f"+{FLAGS_OFFSET}"
        )
        b.comment("returns a new tuple of the outputs, a Python int (rc) or NULL (MemoryError)")
        objs = self._check_arguments(b, fn, args_tuple)
        data = self._read_inputs(b, fn, objs)
        result, out_data = self._allocate_outputs(b, fn, objs, data)
        data = data + out_data
        tstate, arena = self._prepare_run(b, fn, result)
        fail = fn.append_basic_block("kernel_failed")
        run = run_in_parts if split_into_parts(plan) else Lowerer._run_kernels  # parts.py
        rc_slot = run(self, b, fn, kfns, data, arena, fail)
        if arena is not None:
            b.call(self._get_free(), [arena])
        if tstate is not None:
            b.call(self._py_fn("graphc_PyEval_RestoreThread"), [tstate])
        b.ret(result)
        b.position_at_end(fail)
        if arena is not None:
            b.call(self._get_free(), [arena])
        self._fail(
            b,
            result,
            b.load(rc_slot, typ=I32) if rc_slot is not None else ir.Constant(I32, RC_INDEX),
        )
        return self.module

    def _check_arguments(self, b, fn, args_tuple) -> list:
        """The argument is a tuple of ``n_in`` objects, each exactly an ndarray (else
        return RC_ARGS or RC_TYPE); returns the objects (with more than
        ``ENTRY_LOOP_MIN`` inputs, an :class:`_Objects` that loads one when asked: the
        type check is then a loop over the tuple's items)."""
        tp = b.load(
            b.gep(args_tuple, [ir.Constant(I64, OB_TYPE_OFFSET)], source_etype=I8),
            typ=PTR,
            name="arrays_type",
        )
        size = b.load(
            b.gep(args_tuple, [ir.Constant(I64, OB_SIZE_OFFSET)], source_etype=I8),
            typ=I64,
            name="arrays_size",
        )
        args_ok = b.and_(
            b.icmp_unsigned("==", tp, self._py_type("graphc_PyTuple_Type")),
            b.icmp_unsigned("==", size, ir.Constant(I64, self.n_in)),
        )
        load = fn.append_basic_block("load_inputs")
        bad_args = fn.append_basic_block("bad_arguments")
        b.cbranch(args_ok, load, bad_args)
        b.position_at_end(bad_args)
        b.ret(self._rc_object(b, RC_ARGS))
        b.position_at_end(load)
        if self._entry_loops():
            return self._check_arguments_loop(b, fn, args_tuple)
        objs = [
            b.load(self._item(b, args_tuple, i), typ=PTR, name=f"in{i}") for i in range(self.n_in)
        ]
        if objs:  # nothing is read from an object that is not an ndarray
            array_type = self._py_type("graphc_PyArray_Type")
            exact = ir.Constant(I1, 1)
            for i, obj in enumerate(objs):
                tp = b.load(
                    b.gep(obj, [ir.Constant(I64, OB_TYPE_OFFSET)], source_etype=I8),
                    typ=PTR,
                    name=f"in{i}_type",
                )
                exact = b.and_(exact, b.icmp_unsigned("==", tp, array_type))
            read = fn.append_basic_block("read_arrays")
            bad_type = fn.append_basic_block("not_an_ndarray")
            b.cbranch(exact, read, bad_type)
            b.position_at_end(bad_type)
            b.ret(self._rc_object(b, RC_TYPE))
            b.position_at_end(read)
        return objs

    def _entry_loops(self) -> bool:
        """Are the entry's per-input checks loops over the argument tuple (many inputs)?"""
        return ENTRY_LOOP_MIN is not None and self.n_in > ENTRY_LOOP_MIN

    def _check_arguments_loop(self, b, fn, args_tuple) -> "_Objects":
        """:meth:`_check_arguments` for many inputs: one loop over the tuple's items that
        returns RC_TYPE at the first one that is not exactly an ndarray."""
        array_type = self._py_type("graphc_PyArray_Type")
        bad_type = fn.append_basic_block("not_an_ndarray")

        def check(i):
            obj = b.load(_item_at(b, args_tuple, i), typ=PTR, name="in_i")
            tp = b.load(
                b.gep(obj, [ir.Constant(I64, OB_TYPE_OFFSET)], source_etype=I8),
                typ=PTR,
                name="in_i_type",
            )
            nxt = fn.append_basic_block("input_is_ndarray")
            b.cbranch(b.icmp_unsigned("==", tp, array_type), nxt, bad_type)
            b.position_at_end(nxt)

        _index_loop(self, b, fn, self.n_in, check, "check_inputs")
        here = b.block
        b.position_at_end(bad_type)
        b.ret(self._rc_object(b, RC_TYPE))
        b.position_at_end(here)
        return _Objects(self, b, args_tuple)

    def _read_inputs(self, b, fn, objs) -> list:
        """The inputs' data pointers, once every input is C-contiguous and aligned and the
        in-place outputs may be written over their inputs (else return RC_LAYOUT)."""
        data, flags = [], []
        ok = ir.Constant(I1, 1)
        if isinstance(objs, _Objects):
            data, flags, ok = self._read_inputs_loop(b, fn, objs)
        for i, obj in enumerate(objs if not isinstance(objs, _Objects) else ()):
            data.append(
                b.load(
                    b.gep(obj, [ir.Constant(I64, DATA_OFFSET)], source_etype=I8),
                    typ=PTR,
                    name=f"in{i}_data",
                )
            )
            fl = b.load(
                b.gep(obj, [ir.Constant(I64, FLAGS_OFFSET)], source_etype=I8),
                typ=I32,
                name=f"in{i}_flags",
            )
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
        return data

    def _read_inputs_loop(self, b, fn, objs: "_Objects") -> tuple:
        """:meth:`_read_inputs` for many inputs: one loop over the items writes their data
        pointers into a stack array and ANDs their layout tests; returns (the data
        pointers, loaded from that array; {input: flags} of the in-place targets; ok)."""
        n = self.n_in
        arr = b.alloca(ir.ArrayType(PTR, n), name="in_data")
        okp = b.alloca(I1, name="inputs_ok")
        b.store(ir.Constant(I1, 1), okp)
        need = ir.Constant(I32, NPY_C_CONTIGUOUS | NPY_ALIGNED)

        def read(i):
            obj = b.load(_item_at(b, objs.args_tuple, i), typ=PTR, name="in_i")
            d = b.load(
                b.gep(obj, [ir.Constant(I64, DATA_OFFSET)], source_etype=I8),
                typ=PTR,
                name="in_i_data",
            )
            b.store(d, b.gep(arr, [ir.Constant(I64, 0), i]))
            fl = b.load(
                b.gep(obj, [ir.Constant(I64, FLAGS_OFFSET)], source_etype=I8),
                typ=I32,
                name="in_i_flags",
            )
            good = b.icmp_unsigned("==", b.and_(fl, need), need)
            b.store(b.and_(b.load(okp, typ=I1), good), okp)

        _index_loop(self, b, fn, n, read, "read_inputs")
        data = [
            b.load(
                b.gep(arr, [ir.Constant(I64, 0), ir.Constant(I64, i)]), typ=PTR, name=f"in{i}_data"
            )
            for i in range(n)
        ]
        flags = {}
        for i in self._written_inputs():
            flags[i] = b.load(
                b.gep(objs[i], [ir.Constant(I64, FLAGS_OFFSET)], source_etype=I8),
                typ=I32,
                name=f"in{i}_flags",
            )
        return data, flags, b.load(okp, typ=I1)

    def _prepare_run(self, b, fn, result) -> tuple:
        """Before the kernels: release the GIL (when they allow it), read the thread count
        (for parallel kernels) and allocate the arena (else fail with RC_NOMEM).
        Returns (thread state or None, arena pointer or None)."""
        plan = self.plan
        tstate = None
        if releases_gil(plan):
            b.comment("release the GIL while the kernels run")
            tstate = b.call(self._py_fn("graphc_PyEval_SaveThread"), [], name="tstate")
        self._tstate = tstate
        self._load_threads(b)
        arena = None
        if plan.arena_bytes:
            arena = b.call(self._get_malloc(), [ir.Constant(I64, plan.arena_bytes)], name="arena")
            nomem = fn.append_basic_block("no_memory")
            go = fn.append_basic_block("run")
            b.cbranch(b.icmp_unsigned("==", arena, ir.Constant(PTR, None)), nomem, go)
            b.position_at_end(nomem)
            self._fail(b, result, ir.Constant(I32, RC_NOMEM))
            b.position_at_end(go)
        return tstate, arena

    def _load_threads(self, b) -> None:
        """Read the thread count once, if a kernel of this function runs in parallel."""
        if any(kb.par is not None for kb in self.builders.values()):
            gv = self.module.globals.get(NUM_THREADS)
            if gv is None:
                gv = ir.GlobalVariable(self.module, I32, name=NUM_THREADS)
            self.nthreads = b.load_atomic(gv, "monotonic", 4, typ=I32, name="nthreads")

    def body_function(self, name: str) -> ir.Function:
        """``i32 name(ptr in0, ..., ptr out0, ..., ptr arena)``: the graph of a loop body
        (or condition) run once -- its kernels in order, as the entry point runs them --
        over raw pointers: C-contiguous inputs, outputs that overlap no input, and an
        arena of ``plan.arena_bytes``.  Returns 0, or a failing kernel's rc."""
        plan = self.plan
        self.builders = {}
        self.epilogues = epilogues(plan)
        self._tstate = None
        kfns = [self._kernel_function(i, k) for i, k in enumerate(plan.kernels)]
        fnty = ir.FunctionType(I32, [PTR] * (self.n_in + self.n_out + 1))
        fn = ir.Function(self.module, fnty, name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        for k, arg in enumerate(fn.args):
            arg.name = (
                f"in{k}"
                if k < self.n_in
                else f"out{k - self.n_in}"
                if k < self.n_in + self.n_out
                else "arena"
            )
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        irtext.comment(
            b,
            f"loop graph {self.g.name}: {self.n_in} inputs, {self.n_out} outputs, "
            f"{len(plan.kernels)} kernels, arena {plan.arena_bytes} bytes",
        )
        self._load_threads(b)
        data = list(fn.args[: self.n_in + self.n_out])
        arena = fn.args[-1] if plan.arena_bytes else None
        fail = fn.append_basic_block("kernel_failed")
        rc_slot = self._run_kernels(b, fn, kfns, data, arena, fail)
        b.ret(ir.Constant(I32, 0))
        b.position_at_end(fail)
        b.ret(b.load(rc_slot, typ=I32) if rc_slot is not None else ir.Constant(I32, RC_INDEX))
        return fn

    def _run_kernels(self, b, fn, kfns: list, data: list, arena, fail, indices=None):
        """Call the kernels in order (parallel ones through the pool, an epilogue inside
        its product's call); an indexing kernel's nonzero rc branches to ``fail``.
        Returns the slot holding that rc, or None when no kernel can fail.  ``indices``:
        only those kernels (a part function of a big plan, graphc.backend.parts)."""
        plan = self.plan
        rc_slot = None
        self._data, self._arena_ptr = data, arena
        # an epilogue runs on its product's row chunks only when its outer loop dim
        # splits at the product's rows (a loop over (8, 64, N) merged to (8, 64 * N)
        # does not): else it is a parallel call of its own (its function takes a range)
        epilogues = {
            i: j
            for i, j in self.epilogues.items()
            if self.builders[j].outer_size % max(self.builders[i].outer_size, 1) == 0
        }
        fused = set(epilogues.values())
        timing = self.profile is not None and not self.prefix  # the top-level graph only
        pending = None  # (kernel index, its start time) of the kernel being timed
        for i in range(len(plan.kernels)) if indices is None else indices:
            kern, kfn = plan.kernels[i], kfns[i]
            if i in fused:
                continue  # run inside its product's shares (see epilogues)
            if timing:
                if pending is not None:
                    self._profile_stop(b, *pending)
                pending = (i, self._profile_now(b))
            args = [self._base(b, buf, data, arena) for buf in self._kernel_bufs(kern)]
            for key, _ in kern.scratch:  # a loop kernel's scratch, in the arena
                off = ir.Constant(I64, plan.buffers[key][1])
                args.append(b.gep(arena, [off], source_etype=I8, name=f"k{i}_scratch"))
            if self.builders[i].par is not None:
                j = epilogues.get(i)
                then = None
                if j is not None:
                    then = (
                        j,
                        kfns[j],
                        [
                            self._base(b, buf, data, arena)
                            for buf in self._kernel_bufs(plan.kernels[j])
                        ],
                    )
                self._parallel_call(b, fn, i, kern, kfn, args, then)
                continue
            rc = b.call(kfn, args, name=f"rc{i}")
            if kern.kind in (
                "getitem",
                "getitem_grad",
                "setitem",
                "gather",
                "scatter",
                "scatter_add",
                "scan_loop",
                "while_loop",
            ):
                nxt = fn.append_basic_block(f"after_k{i}")
                if rc_slot is None:
                    with b.goto_entry_block():
                        rc_slot = b.alloca(I32, name="rc")
                b.store(rc, rc_slot)
                b.cbranch(b.icmp_signed("!=", rc, ir.Constant(I32, 0)), fail, nxt)
                b.position_at_end(nxt)
            for buf in plan.poison_after.get(i, ()):  # Schedule(poison=True) only
                self._poison(b, buf, arena)
        if pending is not None:
            self._profile_stop(b, *pending)
        return rc_slot

    def _profile_now(self, b):
        """Emit ``clock_gettime(CLOCK_MONOTONIC)`` in nanoseconds (profiling builds only);
        with ``GRAPHC_PROFILE=cpu``, the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID:
        a kernel's time without the time the thread was descheduled on a loaded machine)."""
        assert self.profile is not None
        which = 3 if os.environ.get("GRAPHC_PROFILE", "") == "cpu" else 1
        _, clock = self.profile
        with b.goto_entry_block():
            ts = b.alloca(I64, size=2, name="prof_ts")
        fty = ir.FunctionType(I32, [I32, PTR])
        f = b.inttoptr(ir.Constant(I64, clock), fty.as_pointer())
        b.call(f, [ir.Constant(I32, which), b.bitcast(ts, PTR)])  # 1: MONOTONIC, 3: THREAD_CPU
        sec = b.load(ts, typ=I64)
        nsec = b.load(b.gep(ts, [ir.Constant(I64, 1)], source_etype=I64), typ=I64)
        return b.add(b.mul(sec, ir.Constant(I64, 1_000_000_000)), nsec)

    def _profile_stop(self, b, i: int, t0) -> None:
        """Add the time since ``t0`` to kernel i's counter and count one call."""
        assert self.profile is not None
        counters, _ = self.profile
        n = len(self.plan.kernels)
        base = b.inttoptr(ir.Constant(I64, counters), PTR)
        dt = b.sub(self._profile_now(b), t0)
        for slot, val in ((i, dt), (n + i, ir.Constant(I64, 1))):
            p = b.gep(base, [ir.Constant(I64, slot)], source_etype=I64)
            b.atomic_rmw("add", p, val, "monotonic")

    def _allocate_outputs(self, b, fn, objs: list, data: list) -> tuple:
        """The result tuple, filled with new arrays (numpy's ``PyArray_New``, C order, the
        compiled shape and dtype) and, for an output written over an input in place, that
        input object.  Returns (tuple, the outputs' data pointers)."""
        b.comment("outputs: new C-order arrays (PyArray_New), in-place ones are their input")
        result = b.call(
            self._py_fn("graphc_PyTuple_New"), [ir.Constant(I64, self.n_out)], name="result"
        )
        null = ir.Constant(PTR, None)
        failed = fn.append_basic_block("no_result")
        fill = fn.append_basic_block("fill_result")
        b.cbranch(b.icmp_unsigned("==", result, null), failed, fill)
        b.position_at_end(failed)
        b.ret(null)  # PyTuple_New set MemoryError
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
            arr = b.call(
                self._py_fn("graphc_PyArray_New"),
                [
                    self._py_type("graphc_PyArray_Type"),
                    ir.Constant(I32, len(shape)),
                    self._dims_global(shape),
                    ir.Constant(I32, dt.num),
                    null,
                    null,
                    ir.Constant(I32, 0),
                    ir.Constant(I32, 0),
                    null,
                ],
                name=f"out{k}",
            )
            if cleanup is None:  # numpy set MemoryError: drop what was made so far
                cleanup = fn.append_basic_block("no_output")
            nxt = fn.append_basic_block(f"made_out{k}")
            b.cbranch(b.icmp_unsigned("==", arr, null), cleanup, nxt)
            b.position_at_end(nxt)
            b.store(arr, self._item(b, result, k))  # the tuple owns it (PyTuple_SET_ITEM)
            out_data.append(
                b.load(
                    b.gep(arr, [ir.Constant(I64, DATA_OFFSET)], source_etype=I8),
                    typ=PTR,
                    name=f"out{k}_data",
                )
            )
        if cleanup is not None:
            here = b.block
            b.position_at_end(cleanup)
            b.call(self._py_fn("graphc_Py_DecRef"), [result])  # unset items are NULL
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
            gv = ir.GlobalVariable(self.module, I8, name=name)  # only its address is used
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

    def _parallel_call(
        self, b, fn, i: int, kern: Kernel, kfn, args: list, then: Optional[tuple] = None
    ) -> None:
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
        with b.goto_entry_block():  # 8-byte slots: kernel args, partials, chunk count
            ctx = b.bitcast(b.alloca(I64, size=nargs + 2, name=f"k{i}_ctx"), PTR)
            partials = b.bitcast(
                b.alloca(I64, size=MAX_CHUNKS * max(nred, 1), name=f"k{i}_partials"), PTR
            )
        nt = b.select(
            b.icmp_signed("<", self.nthreads, ir.Constant(I32, 1)),
            ir.Constant(I32, 1),
            self.nthreads,
        )
        nt = b.select(
            b.icmp_signed(">", nt, ir.Constant(I32, MAX_THREADS)), ir.Constant(I32, MAX_THREADS), nt
        )
        nt64 = b.zext(nt, I64)
        # one chunk per thread where every chunk re-reads a whole operand (a product's B, a
        # weight gradient's input and output gradient)
        one = kern.kind in ("matmul", "conv2d_weight_grad")
        per_thread = 1 if one else CHUNKS_PER_THREAD
        nchunks = b.select(
            b.icmp_signed("==", nt64, ir.Constant(I64, 1)),
            ir.Constant(I64, 1),
            b.mul(nt64, ir.Constant(I64, per_thread)),
        )
        nchunks = b.select(
            b.icmp_signed(">", nchunks, ir.Constant(I64, size)),
            ir.Constant(I64, max(size, 1)),
            nchunks,
            name=f"k{i}_nchunks",
        )
        for k, a in enumerate(args):
            b.store(b.ptrtoint(a, I64), b.gep(ctx, [ir.Constant(I64, k)], source_etype=I64))
        b.store(b.ptrtoint(partials, I64), b.gep(ctx, [ir.Constant(I64, nargs)], source_etype=I64))
        b.store(nchunks, b.gep(ctx, [ir.Constant(I64, nargs + 1)], source_etype=I64))
        epi = None
        if then is not None:
            j, kfn_j, args_j = then
            per_row = self.builders[j].outer_size // size  # loop elements per product row
            epi = (kfn_j, len(args) - len(args_j), per_row)
        chunk = self._chunk_function(i, kfn, nargs, size, max(nred, 1), epi)
        b.call(self._pool_run(), [chunk, ctx, nchunks, nt])
        if nred:
            kb.combine_partials(b, fn, partials, nchunks, nred, self._data, self._arena_ptr, i)

    def _chunk_function(
        self, i: int, kfn, nargs: int, size: int, stride: int, epi: Optional[tuple] = None
    ):
        """``void k<i>_chunk(ctx, c)``: run chunk c of kernel i's outer loop (one of
        ``nchunks`` near-equal ranges of ``[0, size)``) into partial slot c; then, with
        ``epi`` = (epilogue kernel, index of its first argument, its elements per row of
        kernel i), the epilogue over the same rows."""
        f = ir.Function(self.module, CHUNK_FN, name=f"{self.prefix}k{i}_chunk")
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

    def _written_inputs(self) -> list:
        """The inputs the caller writes outputs back into (``plan.inplace_requested``),
        written in place here or not: the entry checks they are all writeable."""
        return sorted(set(self.plan.inplace.values()) | set(self.plan.inplace_requested.values()))

    def _inplace_guard(self, b, ok, data, flags):
        """An input that an output is written over (``plan.inplace``) must be writeable and
        overlap no other input (``w -= g`` with ``g`` a shifted view of ``w`` would read
        values already written); otherwise rc 1 makes the caller run on copies.

        The pairs are checked by a loop over constant tables (:meth:`_overlap_fn`), not
        by straight-line code: a training step updating every parameter and optimizer
        state in place has hundreds of targets and inputs, and LLVM's optimizer is
        superlinear on the long chain of ``and``s unrolled pairs make (a 100-parameter
        step took minutes to compile)."""
        targets = sorted(set(self.plan.inplace.values()))
        w = ir.Constant(I32, NPY_WRITEABLE)
        written = self._written_inputs()
        if written:
            # every input the caller writes back into (in place here or copied after):
            # one read-only among them makes the caller check before anything is
            # written, so no step is left half applied (graphc.entry)
            b.comment("inputs written back: all writeable, or nothing runs here")
            for i in written:
                ok = b.and_(ok, b.icmp_unsigned("==", b.and_(flags[i], w), w))
        if not targets:
            return ok
        b.comment("in-place outputs: their inputs must overlap no input")
        nbytes = [
            numel(self.g.nx.nodes[n]["shape"]) * np.dtype(self.g.nx.nodes[n]["dtype"]).itemsize
            for n in self.g.inputs
        ]
        n = self.n_in
        lo = b.alloca(I64, size=ir.Constant(I64, n), name="inplace_lo")
        for j in range(n):
            b.store(b.ptrtoint(data[j], I64), b.gep(lo, [ir.Constant(I64, j)], source_etype=I64))
        nb = self._table(f"{self.prefix}inplace_nbytes", nbytes)
        tg = self._table(f"{self.prefix}inplace_targets", targets)
        overlaps = b.call(
            self._overlap_fn(),
            [
                lo,
                nb,
                tg,
                ir.Constant(I64, n),
                ir.Constant(I64, len(targets)),
            ],
        )
        return b.and_(ok, b.xor(overlaps, ir.Constant(I1, 1)))

    def _table(self, name: str, values: list):
        """An internal constant ``[n x i64]`` global holding ``values``."""
        ty = ir.ArrayType(I64, len(values))
        gv = ir.GlobalVariable(self.module, ty, name=name)
        gv.initializer = ir.Constant(ty, [int(v) for v in values])
        gv.global_constant = True
        gv.linkage = "internal"
        return gv

    def _overlap_fn(self):
        """``i1 graphc_inplace_overlap(i64* lo, i64* nbytes, i64* targets, i64 n, i64 t)``:
        whether an input ``targets[k]`` (k < t) with bytes ``[lo[i], lo[i] + nbytes[i])``
        overlaps another input j < n (empty inputs overlap nothing)."""
        name = "graphc_inplace_overlap"
        fn = self.module.globals.get(name)
        if fn is not None:
            return fn
        fnty = ir.FunctionType(I1, [PTR, PTR, PTR, I64, I64])
        fn = ir.Function(self.module, fnty, name=name)
        fn.linkage = "internal"
        lo, nb, tg, n, t = fn.args
        entry = fn.append_basic_block("entry")
        outer = fn.append_basic_block("outer")
        target = fn.append_basic_block("target")
        inner = fn.append_basic_block("inner")
        pair = fn.append_basic_block("pair")
        test = fn.append_basic_block("test")
        next_j = fn.append_basic_block("next_j")
        next_k = fn.append_basic_block("next_k")
        yes = fn.append_basic_block("overlap")
        no = fn.append_basic_block("no_overlap")
        b = ir.IRBuilder(entry)
        zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)
        b.branch(outer)

        def at(arr, idx):
            return b.load(b.gep(arr, [idx], source_etype=I64), typ=I64)

        b.position_at_end(outer)
        k = b.phi(I64, name="k")
        k.add_incoming(zero, entry)
        b.cbranch(b.icmp_unsigned("<", k, t), target, no)
        b.position_at_end(target)
        i = at(tg, k)
        lo_i = at(lo, i)
        nb_i = at(nb, i)
        hi_i = b.add(lo_i, nb_i)
        b.cbranch(b.icmp_unsigned("==", nb_i, zero), next_k, inner)
        b.position_at_end(inner)
        j = b.phi(I64, name="j")
        j.add_incoming(zero, target)
        b.cbranch(b.icmp_unsigned("<", j, n), pair, next_k)
        b.position_at_end(pair)
        nb_j = at(nb, j)
        skip = b.or_(b.icmp_unsigned("==", j, i), b.icmp_unsigned("==", nb_j, zero))
        b.cbranch(skip, next_j, test)
        b.position_at_end(test)
        lo_j = at(lo, j)
        hi_j = b.add(lo_j, nb_j)
        both = b.and_(b.icmp_unsigned("<", lo_i, hi_j), b.icmp_unsigned("<", lo_j, hi_i))
        b.cbranch(both, yes, next_j)
        b.position_at_end(next_j)
        j.add_incoming(b.add(j, one), next_j)
        b.branch(inner)
        b.position_at_end(next_k)
        k.add_incoming(b.add(k, one), next_k)
        b.branch(outer)
        b.position_at_end(yes)
        b.ret(ir.Constant(I1, 1))
        b.position_at_end(no)
        b.ret(ir.Constant(I1, 0))
        return fn

    def _get_malloc(self):
        if self._malloc is None:
            self._malloc = self.module.globals.get("malloc") or ir.Function(
                self.module, ir.FunctionType(PTR, [I64]), name="malloc"
            )
        return self._malloc

    def _poison(self, b, buf, arena) -> None:
        """Overwrite a dead arena buffer (volatile, so LLVM keeps it): floats become NaN
        (bytes 0xFF), integers and bools 0xA5 bytes; a read through an aliasing bug shows."""
        _, off, nbytes = self.plan.buffers[buf]
        byte = 0xFF if self.plan.dtype(buf).kind == "f" else 0xA5
        memset = self.module.declare_intrinsic("llvm.memset", [PTR, I64])
        b.call(
            memset,
            [
                b.gep(arena, [ir.Constant(I64, off)], source_etype=I8, name=f"poison_n{buf}"),
                ir.Constant(I8, byte),
                ir.Constant(I64, nbytes),
                ir.Constant(I1, 1),
            ],
        )

    def _get_free(self):
        if self._free is None:
            self._free = self.module.globals.get("free") or ir.Function(
                self.module, ir.FunctionType(ir.VoidType(), [PTR]), name="free"
            )
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
            if spec[1] in self.plan.inplace:  # written over its input's memory
                return data[self.plan.inplace[spec[1]]]
            return data[self.n_in + spec[1]]
        return b.gep(arena, [ir.Constant(I64, spec[1])], source_etype=I8, name=f"buf_n{buf}")

    def _const_global(self, n: int):
        gv = self.globals.get(n)
        if gv is None:
            v = np.ascontiguousarray(self.g.nx.nodes[n]["attrs"]["value"])
            raw = bytearray(v.astype(v.dtype.newbyteorder("="), copy=False).tobytes())
            ty = ir.ArrayType(I8, max(len(raw), 1))
            gv = ir.GlobalVariable(self.module, ty, name=f"{self.prefix}const_n{n}")
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
            self.plan.kernels[j] is kern for j in self.epilogues.values()
        )

    def _kernel_function(self, i: int, kern: Kernel) -> ir.Function:
        first = [kern.node] + [n for n, _ in kern.stores] + list(kern.reduces)
        self.current_node = next((n for n in first if n is not None), None)
        if kern.kind in loops.KINDS:  # a scan/while: its own loop over its body's function
            fn, self.builders[i] = loops.loop_kernel(self, i, kern)
            return fn
        bufs = self._kernel_bufs(kern)
        par = self._parallel_ok(kern)
        extra = [I64, I64, PTR] if par else []
        fn = ir.Function(
            self.module,
            ir.FunctionType(I32, [PTR] * len(bufs) + extra),
            name=f"{self.prefix}k{i}_{kern.kind}",
        )
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        ptrs = {}
        for buf, arg in zip(bufs, fn.args):
            arg.add_attribute("noalias")  # distinct buffers never overlap
            arg.name = _buf_name(buf)
            ptrs[buf] = arg
        for b in kern.reads | kern.writes:  # in-place outputs: their input's pointer
            if b not in ptrs:
                ptrs[b] = ptrs[self._canonical(b)]
        kb = KernelBuilder(self, fn, ptrs)
        kb.in_place = i in self.plan.alias_kernels
        if par:
            kb.par = fn.args[len(bufs) :]
            for a, nm in zip(kb.par, ("start", "end", "partials")):
                a.name = nm
        self.builders[i] = kb
        kb.comment_nodes(kern)
        if kern.kind == "loop":
            kb.loop_kernel(kern)
        else:  # a kernel of its own: the op's lowering
            op = self.g.nx.nodes[kern.node]["op"]
            if kern.node in self.plan.summed:
                op = "matmul"  # a sum over a product's batch: one product
            low = lowering.get(op, describe(self.g, kern.node))
            if low.kernel is None:
                raise UnsupportedOpError(
                    f"{describe(self.g, kern.node)}: no kernel lowering for {op}"
                )
            low.kernel(kb, kern.node)
        kb.finish()
        return fn


# With more than this many inputs, the entry checks and reads its inputs by loops over the
# argument tuple instead of straight-line code per input: LLVM's O3 pipeline (its SLP
# vectorizer most) is superlinear in the straight-line form, 1,100 inputs took ~30 s to
# optimize (docs/backend.md, "Compile time of the LLVM pipeline").  ``None`` keeps the
# straight-line form for every count (the code before, for measurements).
ENTRY_LOOP_MIN: Optional[int] = 32


class _Objects:
    """The input objects of an entry whose checks are loops: item ``i`` of the argument
    tuple, loaded where it is asked for (only in-place outputs need an input object)."""

    def __init__(self, low: "Lowerer", b, args_tuple) -> None:
        self.low, self.b, self.args_tuple = low, b, args_tuple
        self.cache: dict = {}

    def __getitem__(self, i: int):
        if i not in self.cache:
            self.cache[i] = self.b.load(
                Lowerer._item(self.b, self.args_tuple, i), typ=PTR, name=f"in{i}"
            )
        return self.cache[i]


def _item_at(b, tup, i):
    """Address of item ``i`` (an i64 value) of a tuple."""
    off = b.add(ir.Constant(I64, TUPLE_ITEMS_OFFSET), b.mul(i, ir.Constant(I64, 8)))
    return b.gep(tup, [off], source_etype=I8)


def _index_loop(low: "Lowerer", b, fn, n: int, body, name: str) -> None:
    """``for i in range(n): body(i)`` in the entry, marked not to be unrolled (unrolled,
    it is the straight-line code it replaces).  ``body`` may branch out, as long as it
    leaves ``b`` in a block that falls through."""
    pre = b.block
    cond = fn.append_basic_block(f"{name}_cond")
    blk = fn.append_basic_block(name)
    done = fn.append_basic_block(f"{name}_done")
    b.branch(cond)
    b.position_at_end(cond)
    i = b.phi(I64, name=f"{name}_i")
    i.add_incoming(ir.Constant(I64, 0), pre)
    b.cbranch(b.icmp_signed("<", i, ir.Constant(I64, n)), blk, done)
    b.position_at_end(blk)
    body(i)
    i.add_incoming(b.add(i, ir.Constant(I64, 1), flags=["nsw", "nuw"]), b.block)
    b.branch(cond).set_metadata("llvm.loop", no_unroll_loop_id(low.module))
    b.position_at_end(done)


def _buf_name(buf) -> str:
    if isinstance(buf, tuple):
        return f"{buf[0]}{buf[1]}"
    return f"n{buf}"


def lower(plan: Schedule, name: str, profile: Optional[tuple] = None) -> ir.Module:
    """The LLVM module for a plan (see the module docstring for the calling convention).

    An exception from deep inside the code generation is re-raised as a LoweringError
    naming the node being lowered, its op and the user's source line (errors of graphc's
    own already name their node)."""
    low = Lowerer(plan, name)
    low.profile = profile
    try:
        return low.build()
    except GraphcError:
        raise
    except Exception as e:
        n = low.current_node
        at = f" at {describe(plan.g, n)}" if n is not None and n in plan.g else ""
        raise with_context(
            LoweringError,
            f"graphc: lowering {printable(name)} failed{at}: {type(e).__name__}: {e}",
            e,
            node=n,
        ) from e
