"""A persistent worker pool for graphc's parallel loops, in LLVM IR, built once per process.

Generated code splits a big loop into chunks and calls

```c
void graphc_pool_run(void (*chunk)(void *ctx, int64_t c), void *ctx,
                     int64_t nchunks, int32_t nthreads);
```

which returns once ``chunk(ctx, c)`` has run for every ``c`` in ``[0, nchunks)``.
The calling thread and up to ``nthreads - 1`` workers claim chunks from a shared
counter, so the chunks a thread runs depend on timing but the chunks
themselves, and therefore the results, do not (each chunk writes its own
partial results, which the caller combines in chunk order).

Why a pool: creating and joining a pthread on every call of a parallel loop
cost about 50 us here, plus the new thread's cold start: a sum over 2^18
elements took 85 us on two threads against 40 us on one (17 us with the pool),
and W2's loop 1.0 ms on two threads for 1.65 ms on one (0.8 ms with the pool,
whose dynamically claimed chunks also even out a late or busy thread).
The workers are created lazily (when a call first asks for more threads than
exist), detached, and have every signal blocked.  Between jobs a worker spins
for a short, bounded time (:data:`SPIN_NS`; every 64 ``pause`` instructions it
calls ``sched_yield`` and reads the clock) and then sleeps on a condition
variable, so an idle pool costs no CPU.  A worker that finds itself on the CPU
of the thread that posted the last job does not spin at all: the two would only
take turns on that CPU, and the scheduler can move a sleeping thread to an idle
CPU when it wakes it, while a spinning one tends to stay where it is.  The
calling thread waits the same way for the last chunk a worker is still running.

* Concurrency: one job at a time.  A call that finds the pool busy (another
  Python thread is using it) runs all its chunks on its own thread instead of
  waiting; the chunks are the same, so the results are too.
* Thread counts: a job uses ``min(nthreads - 1, workers started)`` workers;
  the others ignore it.  Lowering ``graphc.set_num_threads`` leaves the extra
  workers asleep; raising it starts more.
* Failure: if ``pthread_create`` fails, the pool keeps the workers it has
  (possibly none) and the caller runs the remaining chunks itself.
* Jobs are numbered, and a chunk is claimed with a compare-and-swap on
  ``(job << 32) | next chunk``, so a worker that wakes up late can never take a
  chunk of a newer job with an older job's function.
* Exit: the workers sleep in ``pthread_cond_wait`` and are detached, so the
  process exits without waiting for them.  The pool's machine code is never
  freed (the JIT module is kept alive for the life of the process), because
  sleeping workers return into it.
* ``fork()``: the child has none of the parent's workers; an
  ``os.register_at_fork`` hook re-initializes the pool there, and the child
  starts its own workers on first use.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

import llvmlite.binding as llvm
from llvmlite import ir

from ..backend.abi import CHUNK_FN, POOL_RUN as RUN_SYMBOL, POOL_RUN_FN as RUN_FN
from . import llvm_engine

#: the most workers the pool starts (a job uses at most nthreads - 1 of them)
MAX_WORKERS = 63
#: how long an idle worker (and a caller waiting for a worker's last chunk) spins
#: before it sleeps on a condition variable.  Waking a sleeping worker costs tens of
#: microseconds on a virtual machine, and a training step has serial kernels of that
#: length between its parallel ones: on a quiet 2-CPU VM, W8's compiled step took 2.46
#: ms with 50 us, 2.21 with 500 us, 2.20 with 2 ms (and 3.63 ms never spinning); W7's
#: 2.57, 2.49 and 2.45 ms (medians of six alternating rounds in one process).
#: (PyTorch's OpenMP workers spin far longer: GNU OpenMP ~0.3 M iterations, Intel's
#: 200 ms.)  An idle pool still sleeps within a millisecond.
SPIN_NS = 500_000

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()
#: bytes reserved for each pthread_mutex_t / pthread_cond_t / sigset_t (opaque; glibc's
#: are 40, 48 and 128 bytes on x86-64, macOS's 64, 48 and 4)
OPAQUE_BYTES = 256


def _has_symbol(name: str) -> bool:
    """Can the JIT resolve ``name`` from the process (libc)?"""
    try:
        getattr(ctypes.CDLL(None), name)
        return True
    except (AttributeError, OSError):
        return False


class _Callee:
    """A pointer value seen as a callee of type CHUNK_FN: llvmlite reads a callee's type
    from ``function_type``, which an opaque pointer value does not have."""

    function_type = CHUNK_FN

    def __init__(self, value: ir.Value) -> None:
        self.value = value
        self.type = value.type

    def get_reference(self) -> str:
        return self.value.get_reference()


def _call_chunk(b: ir.IRBuilder, fn: ir.Value, ctx: ir.Value, c: ir.Value) -> None:
    """``fn(ctx, c)`` through a function pointer."""
    b.call(_Callee(fn), [ctx, c])


class _Builder:
    """Emits the pool module (see the module docstring for the protocol)."""

    def __init__(self) -> None:
        self.m = ir.Module(name="graphc_pool")
        m = self.m

        def opaque(name):
            ty = ir.ArrayType(ir.IntType(8), OPAQUE_BYTES)
            g = ir.GlobalVariable(m, ty, name=name)
            g.initializer = ir.Constant(ty, None)
            g.align = 64
            g.linkage = "internal"
            return g

        def scalar(name, ty, value):
            g = ir.GlobalVariable(m, ty, name=name)
            g.initializer = ir.Constant(ty, value)
            g.align = 64  # one cache line each: no false sharing
            g.linkage = "internal"
            return g

        self.mutex, self.work_cv = opaque("pool_mutex"), opaque("pool_work_cv")
        self.done_cv, self.submit = opaque("pool_done_cv"), opaque("pool_submit")
        self.job_id = scalar("job_id", I64, 0)  # atomic; 0 = no job yet
        self.job_fn = scalar("job_fn", PTR, None)  # job fields: written and read under mutex
        self.job_ctx = scalar("job_ctx", PTR, None)
        self.job_n = scalar("job_n", I64, 0)
        self.job_workers = scalar("job_workers", I64, 0)
        self.ticket = scalar("ticket", I64, 0)  # atomic: (job << 32) | next chunk
        self.done = scalar("done", I64, 0)  # atomic: chunks finished in this job
        self.started = scalar("started", I64, 0)  # workers running (written by the
        #                                               submit lock holder only)
        self.limit = scalar("worker_limit", I64, MAX_WORKERS)
        self.spin_ns = scalar("spin_ns", I64, SPIN_NS)
        self.caller_cpu = scalar("caller_cpu", I64, -1)  # atomic: CPU of the last post

        def decl(name, ret, args):
            return ir.Function(m, ir.FunctionType(ret, args), name=name)

        self.mutex_init = decl("pthread_mutex_init", I32, [PTR, PTR])
        self.lock_fn = decl("pthread_mutex_lock", I32, [PTR])
        self.trylock_fn = decl("pthread_mutex_trylock", I32, [PTR])
        self.unlock_fn = decl("pthread_mutex_unlock", I32, [PTR])
        self.cond_init = decl("pthread_cond_init", I32, [PTR, PTR])
        self.cond_wait = decl("pthread_cond_wait", I32, [PTR, PTR])
        self.cond_broadcast = decl("pthread_cond_broadcast", I32, [PTR])
        self.create = decl("pthread_create", I32, [PTR, PTR, PTR, PTR])
        self.detach = decl("pthread_detach", I32, [I64])  # pthread_t: 8 bytes
        self.clock_gettime = decl("clock_gettime", I32, [I32, PTR])
        self.sigfillset = decl("sigfillset", I32, [PTR])
        self.sigmask = decl("pthread_sigmask", I32, [I32, PTR, PTR])
        self.sched_yield = decl("sched_yield", I32, [])
        self.getcpu = decl("sched_getcpu", I32, []) if _has_symbol("sched_getcpu") else None
        triple = llvm.get_process_triple()
        self.pause = (
            decl("llvm.x86.sse2.pause", VOID, [])
            if triple.startswith(("x86_64", "i386", "i686"))
            else None
        )

    # --- small helpers --------------------------------------------------------------
    @staticmethod
    def c64(v):
        return ir.Constant(I64, v)

    @staticmethod
    def load_atomic(b, p):
        return b.load_atomic(p, "seq_cst", 8, typ=I64)

    @staticmethod
    def store_atomic(b, v, p):
        b.store_atomic(v, p, "seq_cst", 8)

    def function(self, name, fnty, internal=True):
        f = ir.Function(self.m, fnty, name=name)
        if internal:
            f.linkage = "internal"
        f.attributes.add("nounwind")
        return f

    def serial(self, b, f, fn, ctx, n):
        """for (c = 0; c < n; c++) fn(ctx, c)"""
        with b.goto_entry_block():
            slot = b.alloca(I64)
        b.store(self.c64(0), slot)
        cond, body, done = (f.append_basic_block(s) for s in ("ser_cond", "ser_body", "ser_done"))
        b.branch(cond)
        b.position_at_end(cond)
        c = b.load(slot, typ=I64)
        b.cbranch(b.icmp_signed("<", c, n), body, done)
        b.position_at_end(body)
        _call_chunk(b, fn, ctx, c)
        b.store(b.add(c, self.c64(1)), slot)
        b.branch(cond)
        b.position_at_end(done)

    # --- functions ------------------------------------------------------------------
    def build(self) -> ir.Module:
        self.now = self._now()
        self.spin_eq = self._spin("worker_spin", True, worker=True)
        self.spin_ne = self._spin("caller_spin", False, worker=False)
        self.run_chunks = self._run_chunks()
        self.worker = self._worker()
        self._init()
        self._run()
        self._setters()
        return self.m

    def _now(self):
        """Monotonic clock in nanoseconds."""
        f = self.function("now_ns", ir.FunctionType(I64, []))
        b = ir.IRBuilder(f.append_basic_block("entry"))
        ts = b.alloca(I64, size=2)
        b.call(self.clock_gettime, [ir.Constant(I32, time.CLOCK_MONOTONIC), ts])
        sec = b.load(ts, typ=I64)
        nsec = b.load(b.gep(ts, [self.c64(1)], source_etype=I64), typ=I64)
        b.ret(b.add(b.mul(sec, self.c64(1_000_000_000)), nsec))
        return f

    def _spin(self, name, while_equal, worker):
        """Spin while *p == v (or != v), at most spin_ns.  Every 64 pauses: give the CPU
        to any other runnable thread (sched_yield) and check the clock.  A worker also
        stops spinning when it runs on the CPU the last job's caller ran on: sharing a
        CPU, the two would only take turns, and a sleeping worker is placed on an idle
        CPU by the scheduler when it is woken (a spinning one may stay where it is)."""
        f = self.function(name, ir.FunctionType(VOID, [PTR, I64]))
        p, v = f.args
        entry, outer, inner, more, check, out = (
            f.append_basic_block(s) for s in ("entry", "outer", "inner", "more", "check", "out")
        )
        b = ir.IRBuilder(entry)
        i = b.alloca(I64)
        ns = b.load_atomic(self.spin_ns, "monotonic", 8, typ=I64)
        deadline = b.add(b.call(self.now, []), ns)
        go = b.icmp_signed(">", ns, self.c64(0))
        if worker:
            go = b.and_(go, b.not_(self._colocated(b)))
        b.cbranch(go, outer, out)
        b.position_at_end(outer)
        b.store(self.c64(0), i)
        b.branch(inner)
        b.position_at_end(inner)
        same = b.icmp_unsigned("==", self.load_atomic(b, p), v)
        b.cbranch(same if while_equal else b.not_(same), more, out)
        b.position_at_end(more)
        if self.pause is not None:
            b.call(self.pause, [])
        k = b.add(b.load(i, typ=I64), self.c64(1))
        b.store(k, i)
        b.cbranch(b.icmp_signed("<", k, self.c64(64)), inner, check)
        b.position_at_end(check)
        b.call(self.sched_yield, [])
        go = b.icmp_signed("<", b.call(self.now, []), deadline)
        if worker:
            go = b.and_(go, b.not_(self._colocated(b)))
        b.cbranch(go, outer, out)
        b.position_at_end(out)
        b.ret_void()
        return f

    def _colocated(self, b):
        """Is this thread on the CPU the last caller posted its job from?"""
        if self.getcpu is None:
            return ir.Constant(I1, 0)
        cpu = b.sext(b.call(self.getcpu, []), I64)
        return b.and_(
            b.icmp_signed(">=", cpu, self.c64(0)),
            b.icmp_signed("==", cpu, self.load_atomic(b, self.caller_cpu)),
        )

    def _run_chunks(self):
        """Claim and run chunks of job ``id`` until none is left (or the job is gone)."""
        f = self.function("run_chunks", ir.FunctionType(VOID, [PTR, PTR, I64, I64]))
        fn, ctx, n, job = f.args
        entry, loop, claim, run, last, out = (
            f.append_basic_block(s) for s in ("entry", "loop", "claim", "run", "last", "out")
        )
        b = ir.IRBuilder(entry)
        tag = b.shl(b.and_(job, self.c64(0xFFFFFFFF)), self.c64(32))
        b.branch(loop)
        b.position_at_end(loop)
        t = self.load_atomic(b, self.ticket)
        ours = b.icmp_unsigned("==", b.and_(t, self.c64(~0xFFFFFFFF)), tag)
        c = b.and_(t, self.c64(0xFFFFFFFF))
        b.cbranch(b.and_(ours, b.icmp_signed("<", c, n)), claim, out)
        b.position_at_end(claim)
        pair = b.cmpxchg(self.ticket, t, b.add(t, self.c64(1)), "seq_cst", "seq_cst")
        b.cbranch(b.extract_value(pair, 1), run, loop)
        b.position_at_end(run)
        _call_chunk(b, fn, ctx, c)
        d = b.add(b.atomic_rmw("add", self.done, self.c64(1), "seq_cst"), self.c64(1))
        b.cbranch(b.icmp_signed("==", d, n), last, loop)
        b.position_at_end(last)  # the job is complete: wake the caller
        b.call(self.lock_fn, [self.mutex])
        b.call(self.cond_broadcast, [self.done_cv])
        b.call(self.unlock_fn, [self.mutex])
        b.branch(out)
        b.position_at_end(out)
        b.ret_void()
        return f

    def _worker(self):
        """``void *worker(void *k)``: wait for a job, help with it if k <= its workers, repeat.
        A worker the last job did not want (the thread count was lowered) sleeps at once
        instead of spinning."""
        f = self.function("worker", ir.FunctionType(PTR, [PTR]))
        entry, loop, spin, lock, wait, sleep, got, helpb = (
            f.append_basic_block(s)
            for s in ("entry", "loop", "spin", "lock", "wait", "sleep", "got", "help")
        )
        b = ir.IRBuilder(entry)
        k = b.ptrtoint(f.args[0], I64)
        mask = b.alloca(ir.ArrayType(ir.IntType(8), OPAQUE_BYTES))
        b.call(self.sigfillset, [mask])  # signals go to Python's threads, never here
        b.call(
            self.sigmask, [ir.Constant(I32, int(signal.SIG_BLOCK)), mask, ir.Constant(PTR, None)]
        )
        seen = b.alloca(I64)
        wanted = b.alloca(I1)
        b.store(self.c64(-1), seen)  # take part in whatever job is current
        b.store(ir.Constant(I1, 1), wanted)
        b.branch(loop)
        b.position_at_end(loop)
        my = b.load(seen, typ=I64)
        b.cbranch(b.load(wanted, typ=I1), spin, lock)
        b.position_at_end(spin)
        b.call(self.spin_eq, [self.job_id, my])
        b.branch(lock)
        b.position_at_end(lock)
        b.call(self.lock_fn, [self.mutex])
        b.branch(wait)
        b.position_at_end(wait)
        b.cbranch(b.icmp_unsigned("==", self.load_atomic(b, self.job_id), my), sleep, got)
        b.position_at_end(sleep)
        b.call(self.cond_wait, [self.work_cv, self.mutex])
        b.branch(wait)
        b.position_at_end(got)
        job = self.load_atomic(b, self.job_id)
        fn = b.load(self.job_fn, typ=PTR)
        ctx = b.load(self.job_ctx, typ=PTR)
        n = b.load(self.job_n, typ=I64)
        want = b.load(self.job_workers, typ=I64)
        b.call(self.unlock_fn, [self.mutex])
        b.store(job, seen)
        use = b.icmp_signed("<=", k, want)
        b.store(use, wanted)
        b.cbranch(use, helpb, loop)
        b.position_at_end(helpb)
        b.call(self.run_chunks, [fn, ctx, n, job])
        b.branch(loop)
        return f

    def _init(self):
        """(Re)initialize locks and state: at first use, and in a forked child."""
        f = self.function("graphc_pool_init", ir.FunctionType(VOID, []), internal=False)
        b = ir.IRBuilder(f.append_basic_block("entry"))
        null = ir.Constant(PTR, None)
        memset = self.m.declare_intrinsic("llvm.memset", [PTR, I64])
        for g in (self.mutex, self.work_cv, self.done_cv, self.submit):
            b.call(
                memset,
                [g, ir.Constant(ir.IntType(8), 0), self.c64(OPAQUE_BYTES), ir.Constant(I1, 0)],
            )
        for g in (self.mutex, self.submit):
            b.call(self.mutex_init, [g, null])
        for g in (self.work_cv, self.done_cv):
            b.call(self.cond_init, [g, null])
        for g in (self.job_id, self.ticket, self.done):
            self.store_atomic(b, self.c64(0), g)
        b.store(null, self.job_fn)
        b.store(null, self.job_ctx)
        for g in (self.job_n, self.job_workers, self.started):
            b.store(self.c64(0), g)
        b.ret_void()

    def _run(self):
        f = self.function(RUN_SYMBOL, RUN_FN, internal=False)
        fn, ctx, n, nt = f.args
        blocks = (
            "entry",
            "try",
            "serial",
            "start_cond",
            "start",
            "started",
            "post",
            "wait",
            "sleep",
            "finish",
            "release",
        )
        (entry, trylk, serial, start_cond, start, started, post, wait, sleep, finish, release) = (
            f.append_basic_block(s) for s in blocks
        )
        b = ir.IRBuilder(entry)
        tid = b.alloca(I64)
        nt64 = b.sext(nt, I64)
        trivial = b.or_(b.icmp_signed("<=", nt64, self.c64(1)), b.icmp_signed("<=", n, self.c64(1)))
        b.cbranch(trivial, serial, trylk)

        b.position_at_end(serial)  # all chunks on this thread
        self.serial(b, f, fn, ctx, n)
        b.ret_void()

        b.position_at_end(trylk)  # busy (another thread's job): run serially
        busy = b.icmp_signed("!=", b.call(self.trylock_fn, [self.submit]), ir.Constant(I32, 0))
        b.cbranch(busy, serial, start_cond)

        b.position_at_end(start_cond)  # start workers up to min(nt - 1, limit)
        want = b.sub(nt64, self.c64(1))
        lim = b.load_atomic(self.limit, "monotonic", 8, typ=I64)
        want = b.select(b.icmp_signed("<", lim, want), lim, want)
        have = b.load(self.started, typ=I64)
        b.cbranch(b.icmp_signed("<", have, want), start, started)
        b.position_at_end(start)
        k = b.add(have, self.c64(1))
        err = b.call(self.create, [tid, ir.Constant(PTR, None), self.worker, b.inttoptr(k, PTR)])
        ok_bb = f.append_basic_block("created")
        b.cbranch(b.icmp_signed("==", err, ir.Constant(I32, 0)), ok_bb, started)
        b.position_at_end(ok_bb)
        b.call(self.detach, [b.load(tid, typ=I64)])
        b.store_atomic(k, self.started, "monotonic", 8)
        b.branch(start_cond)

        b.position_at_end(started)
        have = b.load(self.started, typ=I64)
        use = b.select(b.icmp_signed("<", have, want), have, want)
        none = f.append_basic_block("no_workers")
        b.cbranch(b.icmp_signed(">", use, self.c64(0)), post, none)
        b.position_at_end(none)
        self.serial(b, f, fn, ctx, n)
        b.branch(release)

        b.position_at_end(post)  # publish the job, wake sleeping workers
        b.call(self.lock_fn, [self.mutex])
        job = b.add(self.load_atomic(b, self.job_id), self.c64(1))
        b.store(fn, self.job_fn)
        b.store(ctx, self.job_ctx)
        b.store(n, self.job_n)
        b.store(use, self.job_workers)
        self.store_atomic(b, b.shl(b.and_(job, self.c64(0xFFFFFFFF)), self.c64(32)), self.ticket)
        self.store_atomic(b, self.c64(0), self.done)
        self.store_atomic(b, job, self.job_id)
        if self.getcpu is not None:
            self.store_atomic(b, b.sext(b.call(self.getcpu, []), I64), self.caller_cpu)
        b.call(self.cond_broadcast, [self.work_cv])
        b.call(self.unlock_fn, [self.mutex])
        b.call(self.run_chunks, [fn, ctx, n, job])
        b.call(self.spin_ne, [self.done, n])  # a worker may still run its last chunk
        b.call(self.lock_fn, [self.mutex])
        b.branch(wait)
        b.position_at_end(wait)
        b.cbranch(b.icmp_signed("<", self.load_atomic(b, self.done), n), sleep, finish)
        b.position_at_end(sleep)
        b.call(self.cond_wait, [self.done_cv, self.mutex])
        b.branch(wait)
        b.position_at_end(finish)
        b.call(self.unlock_fn, [self.mutex])
        b.branch(release)
        b.position_at_end(release)
        b.call(self.unlock_fn, [self.submit])
        b.ret_void()

    def _setters(self):
        """Test and tuning hooks: spin time, worker limit, workers started."""
        for name, g in (
            ("graphc_pool_set_spin_ns", self.spin_ns),
            ("graphc_pool_set_worker_limit", self.limit),
        ):
            f = self.function(name, ir.FunctionType(I64, [I64]), internal=False)
            b = ir.IRBuilder(f.append_basic_block("entry"))
            b.ret(b.atomic_rmw("xchg", g, f.args[0], "monotonic"))
        f = self.function("graphc_pool_started", ir.FunctionType(I64, []), internal=False)
        b = ir.IRBuilder(f.append_basic_block("entry"))
        b.ret(b.load_atomic(self.started, "monotonic", 8, typ=I64))


def build_module() -> ir.Module:
    """The pool's LLVM module (for inspection; :func:`ensure` compiles it once)."""
    return _Builder().build()


_lock = threading.Lock()
_jit = None
_hooks: dict = {}


def _new_lock_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # held by a thread of the parent: see llvm_engine._new_lock_in_child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


#: how the pool's code was obtained in this process: None (not yet), "compiled",
#: "disk-stored" (compiled, then written to the disk cache) or "disk-hit"
status = None

#: the pool's exported functions (what a module loaded from object code can look up)
EXPORTS = (
    "graphc_pool_init",
    RUN_SYMBOL,
    "graphc_pool_set_spin_ns",
    "graphc_pool_set_worker_limit",
    "graphc_pool_started",
)


def _host_facts() -> dict:
    """What the pool's code depends on beyond the host key and pool.py's source."""
    return {
        "sched_getcpu": _has_symbol("sched_getcpu"),
        "clock_monotonic": int(time.CLOCK_MONOTONIC),
        "sig_block": int(signal.SIG_BLOCK),
    }


def _load_or_compile(disk) -> tuple:
    """(JitModule, how): the pool's object code from ``disk`` (a DiskCache or None) when
    a verified entry for this host and graphc is there, else compiled (and stored)."""
    key = None
    if disk is not None:
        try:
            key = disk.runtime_key("graphc_pool", **_host_facts())
            payload = disk.load(key)
        except Exception:  # a cache problem never stops the pool: compile it
            key = payload = None
        if payload is not None:
            try:
                mod = llvm_engine.load_object_code(
                    payload, name="graphc_pool", function_names=EXPORTS
                )
                for name in EXPORTS:  # an entry without them is not our pool
                    mod.address(name)
                return mod, "disk-hit"
            except llvm_engine.JitError as e:
                disk._reject(disk.file_for(key), str(e))
    # O0: nothing in the pool is hot enough to need LLVM's optimizer (the chunks
    # are the generated code's), and it compiles in ~10 ms instead of ~40 ms
    mod = llvm_engine.compile_module(build_module(), opt_level=0, name="graphc_pool")
    how = "compiled"
    if disk is not None and key is not None:
        try:
            if disk.store(key, mod.object_code(), "graphc_pool"):
                how = "disk-stored"
        except llvm_engine.JitError:
            pass
    return mod, how


def ensure(disk_cache=None) -> None:
    """Compile the pool once per process and register ``graphc_pool_run`` for JIT code.

    Must run before any module that calls the pool is finalized (the native
    backend calls it for plans with parallel loops, passing the compiling
    function's disk cache).  ``disk_cache`` is a ``graphc.runtime.cache.DiskCache``
    or None; with one, the pool's object code is loaded from it (keyed like any
    entry: graphc version, backend source, host CPU / LLVM / llvmlite) or stored
    there after compiling.  Worker threads are not started here: the first
    parallel loop starts them.
    """
    global _jit, status
    if _jit is not None:
        return
    with _lock:
        if _jit is not None:
            return
        mod, how = _load_or_compile(disk_cache)
        # Never freed: sleeping workers return into this code, even during
        # interpreter shutdown.  The extra reference keeps the module (and its
        # engine and context) alive for the life of the process.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(mod))
        proto = ctypes.CFUNCTYPE
        init = proto(None)(mod.address("graphc_pool_init"))
        _hooks.update(
            init=init,
            spin=proto(ctypes.c_int64, ctypes.c_int64)(mod.address("graphc_pool_set_spin_ns")),
            limit=proto(ctypes.c_int64, ctypes.c_int64)(
                mod.address("graphc_pool_set_worker_limit")
            ),
            started=proto(ctypes.c_int64)(mod.address("graphc_pool_started")),
        )
        init()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=init)
        with llvm_engine.LLVM_LOCK:
            llvm.add_symbol(RUN_SYMBOL, mod.address(RUN_SYMBOL))
        status = how
        _jit = mod


def workers_started() -> int:
    """Workers the pool has started in this process (0 before the first parallel call)."""
    return int(_hooks["started"]()) if _jit is not None else 0


def _process_disk_cache():
    """The process-wide disk cache (``GRAPHC_CACHE_DIR`` / ``enable_disk_cache``) or None."""
    from . import cache

    return cache.resolve_disk_cache(None)


def set_spin_ns(ns: int) -> int:
    """Set how long idle workers spin before sleeping; returns the previous value."""
    ensure(_process_disk_cache())
    return int(_hooks["spin"](int(ns)))


def set_worker_limit(n: int) -> int:
    """Start and use at most ``n`` workers from now on (0: callers run every chunk
    themselves, as when no thread can be started); returns the previous limit.
    For tests."""
    ensure(_process_disk_cache())
    return int(_hooks["limit"](max(0, min(int(n), MAX_WORKERS))))
