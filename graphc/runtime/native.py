"""Native execution of a graph: plan, lower, JIT, and a one-crossing call.

A call hands the input and output array *objects* to the entry point as
``PyObject*`` (ctypes ``py_object``: no per-array pointer lookups in Python);
generated code reads each array's data pointer and flags from numpy's array
struct.  The struct offsets are checked once, here, at import.
"""
from __future__ import annotations

import ctypes
from typing import Optional, Sequence

import numpy as np

from ..backend import lower as L
from ..backend.plan import Plan, numel
from ..errors import GraphcError
from ..ir import Graph, describe, verify
from . import cache, jit, pool


def _check_abi() -> Optional[str]:
    """None if numpy's PyArrayObject has the data/flags offsets the generated code uses."""
    try:
        a = np.zeros((4, 4))
        data = ctypes.c_void_p.from_address(id(a) + L.DATA_OFFSET).value
        if data != a.__array_interface__["data"][0]:
            return "data pointer offset differs"
        flags = ctypes.c_int.from_address(id(a) + L.FLAGS_OFFSET).value
        want = L.NPY_C_CONTIGUOUS | L.NPY_ALIGNED
        if flags & want != want:
            return "flags offset differs"
        t = a.T
        tflags = ctypes.c_int.from_address(id(t) + L.FLAGS_OFFSET).value
        if tflags & L.NPY_C_CONTIGUOUS:
            return "flags offset differs (transposed array reads as C-contiguous)"
        tup = (a, t)
        items = [ctypes.c_void_p.from_address(id(tup) + L.TUPLE_ITEMS_OFFSET + 8 * i).value
                 for i in range(2)]
        if items != [id(a), id(t)]:
            return "tuple item offset differs"
    except Exception as e:  # pragma: no cover - exotic Python builds
        return f"probe failed: {e}"
    return None


ABI_PROBLEM = _check_abi()


class NativeExecutable:
    """A compiled graph: ``run(arrays) -> list of new output arrays``."""

    def __init__(self, graph: Graph, opt_level: int = 3, name: Optional[str] = None,
                 fuse: Optional[bool] = None, poison: bool = False,
                 disk_cache: Optional["cache.DiskCache"] = None,
                 inplace: Optional[dict] = None) -> None:
        if ABI_PROBLEM is not None:
            raise GraphcError(f"the native backend cannot read numpy arrays on this build "
                              f"({ABI_PROBLEM}); use backend='interpreter'")
        verify(graph, "lowering")
        self.graph = graph
        self.name = name or graph.name
        fuse = (opt_level >= 1) if fuse is None else fuse
        self.plan = Plan(graph, fuse=fuse, poison=poison, inplace=inplace)
        self.opt_level = opt_level
        if L.needs_pool(self.plan):     # its code calls graphc_pool_run: register it first
            pool.ensure()
        self._inspect = None            # a JIT module with IR text, for code from disk
        key = None
        if disk_cache is not None:
            try:
                # every option that changes the generated code is part of the key
                key = disk_cache.key(graph, opt_level, fuse=fuse, poison=poison,
                                     inplace=sorted(self.plan.inplace.items()))
            except Exception:           # a graph the JSON form cannot hold: no disk caching
                key = None
        # "compiled", "disk-stored" or "disk-hit" (LLVM skipped: object code reloaded)
        self.jit, self.cache_status = cache.load_or_compile(self._lower, disk_cache, key,
                                                            opt_level, self.name)
        self._init_call()

    def _lower(self):
        # the llvmlite module is not kept (~250 KB of Python objects per signature);
        # the JIT module keeps its IR text for llvm_ir() and asm()
        return L.lower(self.plan, self.name)

    def _init_call(self) -> None:
        g = self.graph
        self.n_in = len(g.inputs)
        self.out_specs = [(tuple(g.nx.nodes[o]["shape"]), np.dtype(g.nx.nodes[o]["dtype"]))
                          for o in g.outputs]
        self.in_specs = [(tuple(g.nx.nodes[i]["shape"]), np.dtype(g.nx.nodes[i]["dtype"]))
                         for i in g.inputs]
        # small graphs keep the GIL (cheaper call); big ones release it while running
        big = sum(numel(k.space) for k in self.plan.kernels) > 1 << 14
        proto = (ctypes.CFUNCTYPE if big else ctypes.PYFUNCTYPE)(ctypes.c_int, ctypes.py_object,
                                                                 ctypes.c_int)
        self._cfunc = proto(self.jit.address(L.ENTRY))
        self._inplace = dict(self.plan.inplace)
        self._empty = np.empty
        from . import parallel
        self._threads = parallel.STATE

    @property
    def arena_bytes(self) -> int:
        return self.plan.arena_bytes

    def run(self, arrays: Sequence[np.ndarray]) -> list:
        empty = self._empty
        if self._inplace:              # an output written over its input: hand that back
            inp = self._inplace
            outs = [arrays[inp[k]] if k in inp else empty(s, d)
                    for k, (s, d) in enumerate(self.out_specs)]
        else:
            outs = [empty(s, d) for s, d in self.out_specs]
        rc = self._cfunc((*arrays, *outs), self._threads.n)
        if rc:
            return self._slow(arrays, outs, rc)
        return outs

    def _slow(self, arrays, outs, rc) -> list:
        if rc == L.RC_LAYOUT:
            fixed = []
            for a, (shape, dt) in zip(arrays, self.in_specs):
                a = np.asarray(a)
                if a.shape != shape:
                    raise GraphcError(f"input of shape {a.shape} where {shape} was compiled")
                fixed.append(np.array(a, dtype=dt, order="C", copy=True))
            for k, i in self._inplace.items():
                outs[k] = fixed[i]
            rc = self._cfunc((*fixed, *outs), self._threads.n)
            if rc == 0:
                return outs
        if rc == L.RC_INDEX:
            raise IndexError(f"{self.name}: an index tensor holds a value out of range for the "
                             "dimension it indexes")
        if rc == L.RC_NOMEM:
            raise MemoryError(f"{self.name}: could not allocate {self.plan.arena_bytes} bytes for "
                              "intermediates")
        raise GraphcError(f"{self.name}: native call failed with code {rc}")

    def check_inputs(self, arrays: Sequence) -> list:
        """Coerce inputs to the compiled dtypes/shapes (slow path for unusual arrays)."""
        out = []
        for k, (a, (shape, dt)) in enumerate(zip(arrays, self.in_specs)):
            a = np.asarray(a)
            if a.shape != shape:
                raise GraphcError(f"input {k} has shape {a.shape}, compiled for {shape}")
            if a.dtype != dt:
                a = a.astype(dt)
            out.append(a)
        return out

    # --- inspection -----------------------------------------------------------
    def _inspectable(self) -> "jit.JitModule":
        """A JIT module with IR text: code loaded from the disk cache has none, so the
        first inspection compiles the same module again (used for inspection only)."""
        if self.jit.opt_level is not None:
            return self.jit
        if self._inspect is None:
            mod = jit.compile_module(self._lower(), self.opt_level, name=self.name)
            mod.close()                 # only its IR text is needed (asm() re-generates code)
            self._inspect = mod
        return self._inspect

    def legend(self, mark: str = ";") -> str:
        """Comment lines naming each kernel's graph nodes and source lines.

        LLVM drops comments when it parses IR and inlines the kernels into
        ``graphc_entry`` at O1+, so optimized IR and assembly start with this
        table to tie the code back to the graph.
        """
        lines = [f"{mark} graphc: {self.graph.name}: {len(self.plan.kernels)} kernel(s), arena "
                 f"{self.plan.arena_bytes} bytes; kernels k<i>_<kind> may be inlined into "
                 f"{L.ENTRY}"]
        for i, k in enumerate(self.plan.kernels):
            nodes = {n for n, _ in k.stores} | set(k.reduces)
            if k.node is not None:
                nodes.add(k.node)
            if k.kind == "loop":        # the elementwise nodes fused into the loop, too
                nodes |= {n for n in self.plan.expr_nodes(self.plan.kernel_roots(k))
                          if self.graph.nx.nodes[n]["op"] not in ("input", "const")}
            nodes = sorted(nodes)
            lines.append(f"{mark}   k{i}_{k.kind}:")
            lines += [f"{mark}     {describe(self.graph, n)}" for n in nodes]
        return "\n".join(lines) + "\n"

    def llvm_ir(self, optimized: bool = False) -> str:
        text = self._inspectable().llvm_ir(optimized=optimized)
        return self.legend(";") + text if optimized else text

    def asm(self) -> str:
        return self.legend("#") + self._inspectable().asm()

