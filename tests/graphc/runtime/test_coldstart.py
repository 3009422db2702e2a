"""Cold start: the worker pool's object code in the disk cache, lazy pool threads,
and ``import graphc`` not loading llvmlite (docs/benchmarks.md "Cold start")."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from graphc.runtime import cache, llvm_engine, pool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _run(code: str, **env: str) -> str:
    """Run ``code`` in a fresh interpreter (this checkout first on the path); its stdout."""
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.pop("GRAPHC_CACHE_DIR", None)
    e.update(env)
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env=e,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture
def disk(tmp_path):
    d = tmp_path / "cache"
    return cache.DiskCache(str(d))


def _pool_entries(dc: cache.DiskCache) -> list:
    key = dc.runtime_key("graphc_pool", **pool._host_facts())
    return [p for p in dc.entries() if os.path.basename(p).startswith(key)]


def _works(mod) -> None:
    """The loaded pool's own code runs: a fresh copy has started no workers."""
    ctypes.CFUNCTYPE(None)(mod.address("graphc_pool_init"))()
    assert ctypes.CFUNCTYPE(ctypes.c_int64)(mod.address("graphc_pool_started"))() == 0


# --- the pool's object code in the disk cache --------------------------------------------


def test_pool_miss_stores_then_hit_loads(disk):
    mod, how = pool._load_or_compile(disk)
    assert how == "disk-stored" and disk.stores == 1 and disk.misses == 1
    assert len(_pool_entries(disk)) == 1
    mod2, how2 = pool._load_or_compile(disk)
    assert how2 == "disk-hit" and disk.hits == 1
    assert mod2.object_code() == mod.object_code()
    _works(mod2)


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage-payload"])
def test_pool_corrupted_entry_is_rejected_and_recompiled(disk, damage):
    pool._load_or_compile(disk)
    (fname,) = _pool_entries(disk)
    blob = open(fname, "rb").read()
    if damage == "flip":
        blob = blob[:-100] + bytes([blob[-100] ^ 0xFF]) + blob[-99:]
    elif damage == "truncate":
        blob = blob[: len(blob) // 2]
    elif damage == "empty":
        blob = b""
    else:  # a well-formed entry whose payload is not an object file
        key = os.path.basename(fname)[: -len(cache.SUFFIX)]
        os.unlink(fname)
        disk.store(key, b"not an object file" * 10, "graphc_pool")
        blob = open(fname, "rb").read()
    with open(fname, "wb") as fh:
        fh.write(blob)
    with pytest.warns(cache.DiskCacheWarning, match="ignoring disk cache entry"):
        mod, how = pool._load_or_compile(disk)
    assert how == "disk-stored"  # compiled again, and a good entry written in its place
    assert disk.rejected == 1
    _works(mod)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pool._load_or_compile(disk)[1] == "disk-hit"


@pytest.mark.parametrize(
    "change",
    [
        ("host", lambda mp: mp.setattr(llvm_engine, "host_cpu_key", lambda: "other-cpu|llvm-0")),
        ("version", lambda mp: mp.setattr("graphc._version.__version__", "0.0.0-other")),
        ("source", lambda mp: mp.setattr(cache, "_backend_hash", "0" * 64)),
        ("libc", lambda mp: mp.setattr(pool, "_has_symbol", lambda name: False)),
    ],
    ids=lambda c: c[0],
)
def test_pool_entry_of_another_cpu_llvm_or_graphc_is_not_used(disk, monkeypatch, change):
    pool._load_or_compile(disk)
    assert pool._load_or_compile(disk)[1] == "disk-hit"
    with monkeypatch.context() as mp:
        change[1](mp)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a different key: a plain miss, no warning
            mod, how = pool._load_or_compile(disk)
        assert how == "disk-stored"
    assert len(disk.entries()) == 2  # the first entry is left for its own host/version
    assert pool._load_or_compile(disk)[1] == "disk-hit"


def test_pool_key_names_the_host_llvm_llvmlite_and_graphc(disk, monkeypatch):
    import llvmlite

    seen = {}
    real = cache.hashlib.sha256

    def spy(data=b""):
        seen["text"] = data.decode()
        return real(data)

    monkeypatch.setattr(cache.hashlib, "sha256", spy)
    disk.runtime_key("graphc_pool", **pool._host_facts())
    text = seen["text"]
    from graphc._version import __version__

    for part in (llvm_engine.host_cpu_key(), llvmlite.__version__, __version__, "graphc_pool"):
        assert part in text
    assert llvm_engine.host_cpu_name() in llvm_engine.host_cpu_key()


def test_pool_without_a_disk_cache_is_compiled_and_nothing_written(tmp_path):
    mod, how = pool._load_or_compile(None)
    assert how == "compiled"
    assert cache.resolve_disk_cache(False) is None
    _works(mod)


def test_unusable_directory_means_compile(tmp_path):
    d = tmp_path / "open"
    d.mkdir(mode=0o777)
    os.chmod(d, 0o777)  # writable by others: the cache refuses it
    dc = cache.DiskCache(str(d))
    with pytest.warns(cache.DiskCacheWarning, match="disk cache disabled"):
        mod, how = pool._load_or_compile(dc)
    assert how == "compiled" and os.listdir(d) == []


# --- fresh processes ----------------------------------------------------------------------

_PARALLEL = """
import os, threading
import numpy as np
import graphc
from graphc.runtime import pool

def tasks():
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None

def w2(x, w, b):
    return (x * w + b).tanh().pow(2).sum()

x = np.random.default_rng(0).standard_normal(1 << 19)
w, b = np.array(0.7), np.array(-0.3)
before = tasks()
small = graphc.compile(lambda a: (a * 2.0).sum())
small(np.ones(8))
print("after-small", pool._jit is not None, pool.workers_started(), tasks() == before)
f = graphc.compile(w2)
ref = float(f(x, w, b))
print("after-parallel", pool.status, pool.workers_started() >= 1)
r, wfd = os.pipe()
import warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    pid = os.fork()
if pid == 0:
    ok = all(float(f(x, w, b)) == ref for _ in range(5))
    os.write(wfd, b"1" if ok and pool.workers_started() >= 1 else b"0")
    os._exit(0)
os.close(wfd)
print("child", os.read(r, 1).decode())
os.waitpid(pid, 0)
print("value", repr(ref))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fresh_processes_store_then_load_the_pool_and_fork_works(tmp_path):
    d = tmp_path / "c"
    env = dict(GRAPHC_CACHE_DIR=str(d), GRAPHC_NUM_THREADS="2")
    first = _run(_PARALLEL, **env).split("\n")
    second = _run(_PARALLEL, **env).split("\n")
    # a small graph needs no pool: nothing compiled, no thread started
    assert first[0] == "after-small False 0 True"
    assert first[1] == "after-parallel disk-stored True"
    assert second[1] == "after-parallel disk-hit True"
    assert first[2] == second[2] == "child 1"  # forked child: new workers, same numbers
    assert first[3] == second[3]  # the pool loaded from disk gives the same result
    off = _run(_PARALLEL, GRAPHC_NUM_THREADS="2").split("\n")
    assert off[1] == "after-parallel compiled True" and off[3] == first[3]


def test_pool_threads_start_at_the_first_parallel_loop_not_at_compile():
    out = _run(
        """
        import numpy as np, graphc
        from graphc.runtime import pool
        f = graphc.compile(lambda x: (x * 2.0 + 1.0).tanh().sum())
        x = np.ones(1 << 19)
        graphc.set_num_threads(1)   # compiled with the pool, run on one thread
        f(x)
        print(pool._jit is not None, pool.workers_started())
        graphc.set_num_threads(2)
        f(x)
        print(pool.workers_started())
        """
    ).split()
    assert out == ["True", "0", "1"]


_SERIAL_FIRST = """
    import numpy as np, graphc
    from graphc.runtime import native, pool
    graphc.set_num_threads(2)
    rng = np.random.default_rng(0)
    # a product shared among threads (>= 2^21 multiply-adds) with a loop in its shares,
    # and an elementwise loop split in chunks (>= 2^18 elements)
    x, w = rng.standard_normal((64, 1000)), rng.standard_normal((1000, 200))
    z = rng.standard_normal((512, 1024))
    step = lambda x, w, z: ((x @ w).relu() * 0.5 + 1.0, (z * 2.0).tanh() - z)
    f = graphc.compile(step)
    got = [f(x, w, z)]
    exe = list(f._cache.values())[0].stages["_executable"]
    print(exe.tier, pool.status, pool.workers_started())
    got += [f(x, w, z) for _ in range(9)]
    print(exe.tier, pool.status, pool.workers_started() >= 1)
    native.TIERED = False
    want = graphc.compile(step)(x, w, z)
    print(all(np.array_equal(a, b) for outs in got for a, b in zip(outs, want)))
    # with the pool compiled, quick code calls it
    native.TIERED = True
    g = graphc.compile(lambda x, w: (x @ w) * 3.0)
    g(x, w)
    q = list(g._cache.values())[0].stages["_executable"]
    print(q.tier, 'define internal void @"graphc_pool_run"' in q.jit.llvm_ir(False))
    """


def test_quick_code_compiled_before_the_pool_runs_its_chunks_itself_with_the_same_bits():
    out = _run(_SERIAL_FIRST).split("\n")
    # first call: quick code, no pool compiled, no thread started; the tier-up compiles
    # the pool and starts its worker; every call equals the untiered build with the pool
    assert out[:4] == ["0 None 0", "1 compiled True", "True", "0 False"]


def test_import_graphc_does_not_load_llvmlite():
    out = _run(
        "import graphc, eager, sys; print('llvmlite' in sys.modules, "
        "'graphc.runtime.native' in sys.modules, 'graphc.runtime.pool' in sys.modules)"
    )
    assert out.split() == ["False", "False", "False"]


def test_a_first_compile_does_not_import_numpy_ma_and_masked_arrays_are_still_refused():
    out = _run(
        """
        import sys
        import numpy as np, eager, graphc
        f = graphc.compile(lambda x: x * 2.0)
        f(np.ones(3)); f(eager.ones(3))
        print("numpy.ma" in sys.modules)
        import numpy.ma
        m = np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0])
        try:
            f(m)
        except graphc.GraphcError as e:
            print(type(e).__name__, "masked" in str(e))
        """
    ).split()
    assert out == ["False", "SignatureError", "True"]


def test_the_vector_math_is_imported_by_the_first_graph_that_uses_it():
    out = _run(
        """
        import sys
        import numpy as np, eager, graphc
        from graphc.backend import kernel_builder
        from graphc.runtime import imports
        f = graphc.compile(lambda x, w: ((x @ w).relu() - 1.0).sum())
        f(np.ones((4, 3)), np.ones((3, 2)))
        print("graphc.backend.vecmath" in sys.modules, kernel_builder.import_lock() is imports.IMPORT_LOCK)
        g = graphc.compile(lambda x: (eager.sin(x) + eager.exp(x)).sum())
        x = np.linspace(-3.0, 3.0, 7)
        ok = bool(np.allclose(g(eager.tensor(x)).numpy(), (np.sin(x) + np.exp(x)).sum()))
        print("graphc.backend.vecmath" in sys.modules, ok)
        """
    ).split()
    assert out == ["False", "True", "True", "True"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_graphcs_openblas_starts_no_thread_when_loaded():
    out = _run(
        """
        import os, time
        import numpy as np
        before = len(os.listdir("/proc/self/task"))
        from graphc.backend import blas
        if not blas.available():
            print("skip")
        else:
            print(len(os.listdir("/proc/self/task")) - before, blas.get_num_threads())
            print(os.environ.get("OPENBLAS_NUM_THREADS"))
            blas.set_num_threads(2)   # more threads still come on demand
            print(blas.get_num_threads())
            a = np.arange(64 * 64, dtype=np.float64).reshape(64, 64) / 4096
            print(bool(np.allclose(blas.gemm(a, a), a @ a)))
        """,
        OPENBLAS_NUM_THREADS="3",
    ).split()
    if out == ["skip"]:
        pytest.skip("scipy-openblas32 is not installed")
    assert out == ["0", "1", "3", "2", "True"]  # the user's setting is back in os.environ


# --- start_backend: the one-time start-up outside a first call's timer ----------------------


def test_start_backend_does_the_first_compiles_one_time_work_once():
    out = _run(
        """
        import numpy as np
        import graphc
        from graphc.runtime import native, pool
        assert pool.status is None
        print(native.start_backend(), pool.status, native.start_backend())
        f = graphc.compile(lambda x: (x * 2.0).sum())
        print(float(f(np.arange(4.0))), pool.status)
        """
    )
    assert out.split() == ["True", "compiled", "False", "12.0", "compiled"]


def test_start_backend_uses_the_process_disk_cache(tmp_path):
    code = """
        from graphc.runtime import native, pool
        native.start_backend()
        print(pool.status)
        """
    env = {"GRAPHC_CACHE_DIR": str(tmp_path / "c")}
    assert _run(code, **env).split() == ["disk-stored"]
    assert _run(code, **env).split() == ["disk-hit"]


# --- a compile's llvmlite module is freed by reference counting --------------------------------


def test_the_lowered_modules_instructions_are_freed_without_the_cycle_collector():
    import gc
    import weakref

    import numpy as np

    import graphc
    from graphc.backend import lower as L
    from graphc.backend.schedule import Schedule

    def f(x, w):
        h = (x @ w).relu()
        return (h.exp() / h.exp().sum(dim=1, keepdim=True)).sum(), h.mean()

    x = np.random.default_rng(0).standard_normal((9, 5)).astype(np.float32)
    w = np.ones((5, 3), np.float32)
    cf = graphc.compile(f)
    cf(x, w)
    (entry,) = cf._cache.values()
    opt = entry.stages["optimized"]
    refs = []

    def factory():
        module = L.lower(Schedule(opt, fuse=True), "t")
        for g in module.globals.values():  # every instruction (phi nodes, terminators)
            for b in getattr(g, "blocks", ()):
                refs.extend(weakref.ref(i) for i in b.instructions)
        return module

    was = gc.isenabled()
    gc.disable()
    try:
        mod, how = cache.load_or_compile(factory, None, None, 2, "t")
        assert how == "compiled" and refs
        # the blocks, functions and module, and values the kernel builders hold (their
        # allocas), may stay until a collection; the bulk is freed already (without the
        # release every instruction stays)
        alive = sum(r() is not None for r in refs)
        assert alive <= len(refs) // 5, (alive, len(refs))
    finally:
        if was:
            gc.enable()
    mod.address("graphc_entry")


# --- compile_module writes the object file itself (no MCJIT engine holding the module) ----


def _mcjit_object(text: str, opt_level: int, fast_regalloc: bool) -> bytes:
    """The object file an MCJIT engine built on the module generates (the old path)."""
    from llvmlite import binding as llvm

    with llvm_engine.LLVM_LOCK:
        ctx = llvm.create_context()
        m = llvm.parse_assembly(text, context=ctx)
        tm = llvm_engine._target_machine(opt_level)
        m.triple, m.data_layout = tm.triple, str(tm.target_data)
        llvm_engine._optimize(m, tm, opt_level)
        tm.close()
        engine, captured = llvm_engine._new_engine(m, opt_level)
        with llvm_engine._register_allocation(opt_level > 0 and not fast_regalloc, opt_level):
            engine.finalize_object()
        engine.close()
        ctx.close()
    return captured[0]


def test_compile_module_writes_the_bytes_mcjit_would_and_keeps_no_llvm_module():
    import numpy as np

    import graphc

    f = graphc.compile(lambda x, w: ((x @ w).relu() * 0.5 - x.sum(1, keepdim=True)).sum(0))
    x, w = np.linspace(-1, 1, 12).reshape(4, 3), np.linspace(-2, 2, 9).reshape(3, 3)
    text = f.llvm_ir(x, w)
    for opt_level, fast in ((0, False), (2, False), (3, False), (3, True)):
        mod = llvm_engine.compile_module(text, opt_level, name="t", fast_regalloc=fast)
        assert mod.object_code() == _mcjit_object(text, opt_level, fast), (opt_level, fast)
        assert set(mod.stage_seconds) == {
            "ir text", "llvm parse", "llvm optimize", "llvm codegen", "load"
        }
        assert mod.opt_level == opt_level and mod.fast_regalloc is fast
        assert "graphc_entry" in mod.function_names and mod.address("graphc_entry")
        assert mod.llvm_ir(optimized=False) == text and "graphc_entry:" in mod.asm()
        # the small engine of a loaded object file, as for a disk-cache hit: the LLVM module
        # went with the compile (the engine's only module is an empty one)
        engine, context = llvm_engine._LIVE[id(mod)]
        assert [fn for m in engine._modules for fn in m.functions] == []
        mod.close()
