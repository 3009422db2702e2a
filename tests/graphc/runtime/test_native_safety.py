"""Bad input never reaches native code as garbage, and the disk cache trusts nothing.

* a shape or dtype other than the traced one re-traces (a new signature);
* non-contiguous, reversed, Fortran-order, read-only, misaligned and
  non-native-endian arrays give the right answer (and ordinary arrays keep the
  fast path: no per-call conversion);
* index tensors out of range raise IndexError; risky calls run in a subprocess
  and must not crash it;
* the disk cache directory is created 0700 and refused when another user owns
  it or others can write to it.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import numpy as np
import pytest

import eager
import graphc
from graphc.runtime import cache

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))  # repository root


def f2(x, y):
    return (x * 2.0 + y).tanh().sum(0), x @ y.T


def ref2(x, y):
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    return np.tanh(x * 2.0 + y).sum(0), x @ y.T


def _check(out, want, rtol=1e-12):
    for o, w in zip(out, want):
        np.testing.assert_allclose(o, w, rtol=rtol, atol=1e-12)


# ---------------------------------------------------------------------------------------
# signatures


def test_other_shapes_and_dtypes_retrace():
    cf = graphc.compile(f2, recompile_limit=100)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    _check(cf(x, y), ref2(x, y))
    assert cf.cache_info().traces == 1
    x5, y5 = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    _check(cf(x5, y5), ref2(x5, y5))
    assert cf.cache_info().traces == 2
    assert "shape [3, 4] -> [5, 4]" in cf.recompile_reasons[-1]
    x32 = x.astype(np.float32)
    out = cf(x32, y.astype(np.float32))
    assert out[0].dtype == np.float32
    _check(out, ref2(x32, y.astype(np.float32)), rtol=2e-5)
    assert cf.cache_info().traces == 3 and "float64 -> float32" in cf.recompile_reasons[-1]
    # incompatible shapes fail while tracing, with the op's message, before any native code
    with pytest.raises(Exception, match="size of tensor"):
        cf(np.ones((3, 4)), np.ones((3, 5)))


def test_entry_point_checks_layout_for_views():
    """The signature has no strides: the entry point itself sends non-contiguous or
    misaligned arrays to the copying slow path (return code 1)."""
    cf = graphc.compile(lambda x: x * 2)
    base = np.arange(24.0).reshape(4, 6)
    np.testing.assert_array_equal(cf(base[:, :3]), base[:, :3] * 2)
    np.testing.assert_array_equal(cf(base[:, ::2]), base[:, ::2] * 2)
    assert cf.cache_info().traces == 1


# ---------------------------------------------------------------------------------------
# layouts


def _misaligned(a: np.ndarray) -> np.ndarray:
    raw = bytes(1) + np.ascontiguousarray(a).tobytes()
    m = np.frombuffer(raw, dtype=a.dtype, offset=1, count=a.size).reshape(a.shape)
    assert not m.flags.aligned and not m.flags.writeable
    return m


def _layout(a: np.ndarray, kind: str) -> np.ndarray:
    if kind == "strided":
        big = np.zeros((a.shape[0], 3 * a.shape[1]), a.dtype)
        big[:, ::3] = a
        return big[:, ::3]
    if kind == "reversed":
        return np.ascontiguousarray(a[::-1, ::-1])[::-1, ::-1]
    if kind == "fortran":
        return np.asfortranarray(a)
    if kind == "transposed_view":
        return np.ascontiguousarray(a.T).T
    if kind == "readonly":
        r = a.copy()
        r.flags.writeable = False
        return r
    if kind == "misaligned":
        return _misaligned(a)
    if kind == "big_endian":
        return a.astype(a.dtype.newbyteorder(">"))
    if kind == "little_endian":
        return a.astype(a.dtype.newbyteorder("<"))
    if kind == "swapped_misaligned":
        return _misaligned(a.astype(a.dtype.newbyteorder("S")))
    raise AssertionError(kind)


LAYOUTS = ["strided", "reversed", "fortran", "transposed_view", "readonly", "misaligned",
           "big_endian", "little_endian", "swapped_misaligned"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("kind", LAYOUTS)
def test_unusual_layouts_give_correct_results(kind, dtype):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 4)).astype(dtype)
    y = rng.normal(size=(3, 4)).astype(dtype)
    want = ref2(x, y)
    cf = graphc.compile(f2, recompile_limit=100)
    rtol = 2e-5 if dtype == np.float32 else 1e-12
    _check(cf(x, y), want, rtol)
    lx, ly = _layout(x, kind), _layout(y, kind)
    assert np.array_equal(lx, x) and np.array_equal(ly, y)
    for args in ((lx, y), (x, ly), (lx, ly)):
        out = cf(*args)
        assert all(o.dtype == np.dtype(dtype) and o.dtype.isnative for o in out)
        _check(out, want, rtol)
    np.testing.assert_array_equal(lx, x)              # inputs are not modified


def test_non_native_endian_everywhere():
    """Byte-swapped arrays at the top level, inside containers and as index tensors."""
    x = np.arange(12.0).reshape(3, 4)
    be = x.astype(">f8")
    idx = np.array([2, 0], dtype=">i8")
    cf = graphc.compile(lambda d, i: (d["a"][0] * 2 + d["b"], d["a"][0][i]))
    out = cf({"a": (be,), "b": be.astype(">f4").astype(">f8")}, idx)
    np.testing.assert_array_equal(out[0], x * 3)
    np.testing.assert_array_equal(out[1], x[[2, 0]])
    mixed = graphc.compile(lambda a, b: a - b)
    np.testing.assert_array_equal(mixed(be, x), np.zeros_like(x))
    np.testing.assert_array_equal(mixed(x.astype("<f8"), be), np.zeros_like(x))
    ints = graphc.compile(lambda a: (a.sum(), a.argmax(), a > 3))
    s, am, gt = ints(np.arange(6, dtype=">i8"))
    assert s == 15 and am == 5 and gt.tolist() == [False] * 4 + [True] * 2
    t = graphc.compile(lambda a: a * 2)(eager.from_numpy(np.arange(3.0)))
    np.testing.assert_array_equal(t.numpy(), [0.0, 2.0, 4.0])


def test_native_order_needs_no_per_call_conversion():
    cf = graphc.compile(lambda x: x + 1)
    x = np.ones(3)
    cf(x)
    entry = cf._entry_for((x,))
    exe = entry.stages["_executable"]
    assert entry.run == exe.run_trusted               # the executable itself, unwrapped
    be = x.astype(">f8")
    cf(be)
    swapped = cf._entry_for((be,))
    assert swapped is not entry and swapped.run != swapped.stages["_executable"].run
    assert cf.cache_info().traces == 2
    assert "dtype <f8 -> >f8" in cf.recompile_reasons[-1]


def test_mutating_function_with_big_endian_target():
    def bump(x):
        x[0] = 5.0
        return x.sum()

    cf = graphc.compile(bump)
    be = np.arange(3.0).astype(">f8")
    assert cf(be) == 8.0
    np.testing.assert_array_equal(be, [5.0, 1.0, 2.0])
    assert be.dtype == np.dtype(">f8")


def _sgd(w, g):
    w -= 0.5 * g
    return w.sum()


def _sgd_ref(w, g):
    w -= 0.5 * np.array(g)
    return w.sum()


@pytest.mark.parametrize("case", ["plain", "same_array", "overlap_fwd", "overlap_back",
                                  "strided_target", "readonly_target", "fortran_target",
                                  "misaligned_target", "big_endian_target", "grad_is_view"])
def test_mutated_arguments_follow_numpy_semantics(case):
    """Updates of arguments (possibly written straight into the argument's memory) must
    behave as numpy's in-place operators, whatever the argument's memory looks like."""
    cf = graphc.compile(_sgd, recompile_limit=100)
    base = np.arange(10.0)
    g = np.linspace(1.0, 2.0, 9)
    if case == "plain":
        w = np.arange(9.0)
    elif case == "same_array":
        w = np.arange(9.0)
        g = w
    elif case == "overlap_fwd":
        w, g = base[1:], base[:-1]
    elif case == "overlap_back":
        w, g = base[:-1], base[1:]
    elif case == "strided_target":
        w = np.arange(18.0)[::2]
    elif case == "readonly_target":
        w = np.arange(9.0)
        w.flags.writeable = False
    elif case == "fortran_target":
        w = np.asfortranarray(np.arange(9.0).reshape(3, 3)).reshape(9, order="F")
    elif case == "misaligned_target":
        buf = bytearray(1 + 9 * 8)
        w = np.frombuffer(buf, np.float64, offset=1, count=9)
        w[:] = np.arange(9.0)
    elif case == "big_endian_target":
        w = np.arange(9.0).astype(">f8")
    elif case == "grad_is_view":
        w = np.arange(9.0)
        g = base[1:]
    if case == "readonly_target":
        with pytest.raises(ValueError, match="read-only"):
            cf(w, g)
        np.testing.assert_array_equal(w, np.arange(9.0))     # untouched
        return
    # numpy on copies that reproduce the same aliasing
    rb = base.copy()
    views = {"overlap_fwd": (rb[1:], rb[:-1]), "overlap_back": (rb[:-1], rb[1:])}
    if case in views:
        rw, rg = views[case]
    else:
        rw = np.array(w)
        rg = rw if case == "same_array" else np.array(g)
    want = _sgd_ref(rw, rg)
    for _ in range(2):                   # the second call is a cache hit
        got = cf(w, g)
        want = want if _ == 0 else _sgd_ref(rw, rg)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_allclose(np.asarray(w, np.float64), rw, rtol=1e-12)
        if case in views:
            np.testing.assert_allclose(base, rb, rtol=1e-12)
    # arguments sharing memory get a trace of their own (graphc.aliasing), once
    assert cf.cache_info().traces == (2 if case in ("same_array", "overlap_fwd",
                                                    "overlap_back") else 1)


def _overwrite_after_reading(x, y):
    s = x.sum()
    m = x.amax()
    z = y * 1
    x.copy_(-1.5)                        # the new value does not read x
    y.fill_(2.0)
    return s.exp(), m, z


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_an_update_written_over_an_argument_is_not_read_back_as_the_argument(opt_level):
    """The fuzzer (seed 231) found opt_level 1 fusing ``sum(x)`` into the loop that writes
    ``x``'s update straight into its memory, and loading x after the store: the sum saw
    the new values.  Every load of an iteration now comes before its stores."""
    x, y = np.array([3.0, 1.0, 2.0]), np.array([[4.0, 5.0, 6.0]])
    s, m, z = graphc.compile(_overwrite_after_reading, opt_level=opt_level)(x, y)
    assert s == np.exp(np.float64(6.0)) and m == 3.0
    np.testing.assert_array_equal(z, [[4.0, 5.0, 6.0]])
    np.testing.assert_array_equal(x, [-1.5, -1.5, -1.5])
    np.testing.assert_array_equal(y, [[2.0, 2.0, 2.0]])


# ---------------------------------------------------------------------------------------
# index checks


def test_index_tensors_out_of_range_raise_index_error():
    x = np.arange(10.0)
    take = graphc.compile(lambda x, i: x[i])
    np.testing.assert_array_equal(take(x, np.array([0, -1, 9, -10])), x[[0, -1, 9, -10]])
    for bad in ([10], [-11], [0, 3, 99], [2 ** 40]):
        with pytest.raises(IndexError, match="out of range"):
            take(x, np.array(bad))
    with pytest.raises(IndexError):
        take(x, np.array([12], dtype=np.int32))
    m = np.arange(12.0).reshape(3, 4)
    cols = graphc.compile(lambda m, i, j: m[i, j])
    with pytest.raises(IndexError):
        cols(m, np.array([0, 2]), np.array([1, 4]))

    def put(x, i, v):
        x = x * 1
        x[i] = v
        return x

    with pytest.raises(IndexError):
        graphc.compile(put)(x, np.array([3, 10]), np.ones(2))
    with pytest.raises(IndexError):
        graphc.grad(lambda x, i: x[i].sum())(x, np.array([-11]))
    # the function still works afterwards
    np.testing.assert_array_equal(take(x, np.array([1])), [1.0])


def test_static_indices_are_checked_when_tracing():
    with pytest.raises(IndexError):
        graphc.compile(lambda x: x[5])(np.ones(3))
    with pytest.raises(IndexError):
        graphc.compile(lambda x: x[:, 7])(np.ones((2, 3)))


RISKY = r'''
import warnings
import numpy as np
import graphc

warnings.simplefilter("ignore")
results = []


def attempt(name, fn, *args):
    try:
        out = fn(*args)
        results.append(f"{name}:ok")
        return out
    except Exception as e:
        results.append(f"{name}:{type(e).__name__}")


take = graphc.compile(lambda x, i: x[i], recompile_limit=100)
for bad in ([5], [-6], [1, 2 ** 62], [-(2 ** 63)]):
    attempt("oob", take, np.arange(5.0), np.array(bad))
attempt("oob2d", graphc.compile(lambda x, i: x[:, i]), np.ones((3, 4)), np.array([[0, 4]]))
attempt("oob_setitem", graphc.compile(lambda x, i: x.__setitem__(i, 1.0) or x),
        np.ones(4), np.array([7]))
attempt("oob_grad", graphc.grad(lambda x, i: x[i].sum()), np.ones(4), np.array([4]))

red = graphc.compile(lambda x: (x.sum(), (x * 2).mean()), recompile_limit=100)
axes = graphc.compile(lambda x: ((x * 2).sum(0), x.mean(-1), x.sum((0, 1), keepdim=True)),
                      recompile_limit=100)
for shape in [(0, 3), (3, 0), (0, 0)]:
    attempt(f"axes{shape}", axes, np.empty(shape))
for shape in [(0,), (0, 3), (3, 0), (0, 0), (0, 2 ** 40), (2 ** 40, 0), (2 ** 31, 0, 5)]:
    x = np.empty(shape)
    attempt(f"zero{shape}", red, x)
    out = attempt(f"ew{shape}", graphc.compile(lambda x: (x + 1).exp()), x)
mm = graphc.compile(lambda a, b: a @ b, recompile_limit=100)
attempt("mm_k0", mm, np.ones((3, 0)), np.ones((0, 4)))
attempt("mm_zero_huge", mm, np.empty((0, 2 ** 33)), np.empty((2 ** 33, 0)))
attempt("max_empty", graphc.compile(lambda x: x.amax(0)), np.ones((0, 3)))
attempt("argmax_empty", graphc.compile(lambda x: x.argmax(0)), np.ones((0, 3)))

f = graphc.compile(lambda x, y: (x * y).sum(1), recompile_limit=100)
base = np.arange(64.0).reshape(8, 8)
for view in (base[::2, ::3], base[::-1, ::-2], base.T, np.asfortranarray(base)):
    y = np.ones(view.shape[1])
    out = attempt("view", f, view, y)
    assert np.allclose(out, (view * y).sum(1))
attempt("wrong_shape", f, np.ones((3, 4)), np.ones(5))
attempt("wrong_rank", f, np.ones(4), np.ones((4, 4)))
attempt("wrong_dtype", f, np.ones((3, 4), np.int64), np.ones(4, np.float32))
attempt("object_dtype", f, np.ones((2, 2), object), np.ones(2))
attempt("float16", f, np.ones((2, 2), np.float16), np.ones(2))
attempt("not_an_array", f, "abc", np.ones(2))
attempt("too_few", f, np.ones(3))
print("|".join(results))
print("SURVIVED")
'''


def test_risky_calls_do_not_crash_the_process():
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", RISKY], capture_output=True, text=True,
                       timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, f"exit code {r.returncode}\n{r.stdout}\n{r.stderr}"
    assert r.stdout.strip().endswith("SURVIVED"), r.stdout + r.stderr
    got = r.stdout.split("\n")[0].split("|")
    res = dict(item.rsplit(":", 1) for item in got)
    assert got.count("oob:IndexError") == 4
    assert res["oob2d"] == res["oob_setitem"] == res["oob_grad"] == "IndexError"
    assert res["mm_k0"] == "ok" and res["mm_zero_huge"] == "ok"
    for shape in ["(0,)", "(0, 3)", "(3, 0)", "(0, 0)", "(0, 1099511627776)",
                  "(1099511627776, 0)", "(2147483648, 0, 5)"]:
        assert res[f"zero{shape}"] == "ok" and res[f"ew{shape}"] == "ok", shape
    for shape in ["(0, 3)", "(3, 0)", "(0, 0)"]:
        assert res[f"axes{shape}"] == "ok"
    # reductions with no identity over a zero-size dim: PyTorch's error, when traced
    assert res["max_empty"] == res["argmax_empty"] == "IndexError"
    assert got.count("view:ok") == 4
    assert res["wrong_shape"] == "RuntimeError"          # traced: shapes do not broadcast
    assert res["wrong_dtype"] == "ok"                    # a new signature: re-traced
    assert res["object_dtype"] == "SignatureError"
    assert res["float16"] == "UnsupportedOpError"        # "use backend='interpreter'"
    assert res["not_an_array"] == "SignatureError" and res["too_few"] == "SignatureError"


# ---------------------------------------------------------------------------------------
# objects that are not exactly ndarrays: the native entry checks ob_type itself

FAKES = r'''
import sys
from unittest import mock
import numpy as np
import graphc

cf = graphc.compile(lambda x: x * 2)
x = np.ones(3)
cf(x)
exe = cf._entry_for((x,)).stages["_executable"]


class Evil(int):
    """An int whose memory reads as an aligned C-contiguous array at address 11 (its
    digit count at numpy's data offset, 0x101 in the flags word): native code trusting
    __class__ reads address 11."""
    __class__ = property(lambda s: np.ndarray)
    shape = (3,)
    dtype = np.dtype(np.float64)


class Faker:
    __class__ = property(lambda s: np.ndarray)
    shape = (3,)
    dtype = np.dtype(np.float64)


fakes = {"evil_int": Evil(0x101 << (30 * 10)), "faker": Faker(),
         "mock": mock.MagicMock(spec=np.ndarray), "int": 3}
for name, fake in fakes.items():
    for how, call in (("call", lambda a: cf(a)), ("run", lambda a: exe.run((a,))),
                      ("trusted", lambda a: exe.run_trusted((a,))),
                      ("entry", lambda a: exe._native((a,)))):
        try:
            out = call(fake)
            print(f"{name}/{how}:ok:{out!r}"[:60])
        except Exception as e:
            print(f"{name}/{how}:{type(e).__name__}")
print("SURVIVED")
'''


def test_objects_faking_ndarray_never_reach_native_code():
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", FAKES], capture_output=True, text=True,
                       timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, f"exit code {r.returncode}\n{r.stdout}\n{r.stderr}"
    lines = r.stdout.split()
    assert lines[-1] == "SURVIVED", r.stdout + r.stderr
    res = dict(line.split(":", 2)[:2] for line in lines[:-1])
    from graphc.backend.abi import RC_TYPE
    for name in ("evil_int", "faker", "mock", "int"):
        # the generated entry refuses anything whose ob_type is not ndarray, before reading
        assert f"{name}/entry:ok:{RC_TYPE}" in lines, name
        assert res[f"{name}/run"] == res[f"{name}/trusted"] == "GraphcError", name
    # a compiled function classifies by the real type: ints are static, others refused
    assert res["evil_int/call"] == res["int/call"] == "ok"
    assert res["faker/call"] == res["mock/call"] == "SignatureError"


class _Sub(np.ndarray):
    pass


class _Liar(np.ndarray):
    shape = property(lambda s: (1000,))     # the real shape is what native code reads


@pytest.mark.parametrize("make", [
    lambda a: a.view(np.matrix), lambda a: a.view(_Sub), lambda a: a.view(_Liar),
    lambda a: a.view(np.memmap), lambda a: a.T.view(_Sub).T,
], ids=["matrix", "subclass", "lying_subclass", "memmap", "strided_subclass"])
def test_ndarray_subclasses_are_read_as_their_base_array(make):
    base = np.arange(6.0).reshape(2, 3)
    cf = graphc.compile(lambda x, y: (x * 2 + y).sum(0))
    y = np.ones(3)
    want = (base * 2 + y).sum(0)
    np.testing.assert_array_equal(cf(base, y), want)
    out = cf(make(base.copy()), y)
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, want)
    exe = cf._entry_for((base, y)).stages["_executable"]
    for run in (exe.run, exe.run_trusted):
        np.testing.assert_array_equal(run((make(base.copy()), y))[0], want)


def test_masked_arrays_are_refused():
    """np.asarray would drop the mask: a silently different computation."""
    from graphc.errors import GraphcError, SignatureError
    m = np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    cf = graphc.compile(lambda x: x * 2)
    with pytest.raises(SignatureError, match="masked array"):
        cf(m)
    cf(np.ones(3))
    exe = cf._entry_for((np.ones(3),)).stages["_executable"]
    for run in (exe.run, exe.run_trusted):
        with pytest.raises(GraphcError, match="masked array"):
            run((m,))


# ---------------------------------------------------------------------------------------
# disk cache directory safety


@pytest.fixture
def quiet_env(monkeypatch):
    monkeypatch.delenv(cache.ENV_VAR, raising=False)
    cache.disable_disk_cache()
    yield monkeypatch
    cache.disable_disk_cache()


def test_cache_directory_created_private(tmp_path, quiet_env):
    d = tmp_path / "a" / "b" / "graphc"
    cf = graphc.compile(lambda x: x + 1, disk_cache=str(d))
    np.testing.assert_array_equal(cf(np.ones(2)), [2.0, 2.0])
    st = os.stat(d)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    assert stat.S_IMODE(os.stat(d.parent).st_mode) & 0o077 == 0
    (entry,) = cache.DiskCache(str(d)).entries()
    assert stat.S_IMODE(os.stat(entry).st_mode) == 0o600
    assert not [f for f in os.listdir(d) if f.startswith(".tmp")]     # no temp files left


def test_cache_directory_created_private_despite_umask(tmp_path, quiet_env):
    old = os.umask(0)
    try:
        d = tmp_path / "wide_umask"
        assert cache.DiskCache(str(d)).usable()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_writable_by_others_is_refused(tmp_path, quiet_env, mode):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, mode)
    cf = graphc.compile(lambda x: x * 3, disk_cache=str(d))
    with pytest.warns(cache.DiskCacheWarning, match="writable by group or others"):
        np.testing.assert_array_equal(cf(np.ones(2)), [3.0, 3.0])
    assert os.listdir(d) == []
    assert cf._entry_for((np.ones(2),)).stages["_executable"].cache_status == "compiled"


def test_directory_of_another_user_is_refused(tmp_path, quiet_env):
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    real = os.getuid()
    quiet_env.setattr(os, "getuid", lambda: real + 1)
    c = cache.DiskCache(str(d))
    with pytest.warns(cache.DiskCacheWarning, match="owned by uid"):
        assert not c.usable()
    assert c.load("0" * 64) is None and not c.store("0" * 64, b"code")
    assert os.listdir(d) == []


def test_a_file_is_not_a_cache_directory(tmp_path, quiet_env):
    p = tmp_path / "file"
    p.write_text("x")
    with pytest.warns(cache.DiskCacheWarning, match="not a directory|cannot create"):
        assert not cache.DiskCache(str(p)).usable()


def test_symlinked_entry_is_not_followed(tmp_path, quiet_env):
    d = tmp_path / "c"
    f = lambda x: x - 1  # noqa: E731
    graphc.compile(f, disk_cache=str(d))(np.ones(2))
    (entry,) = cache.DiskCache(str(d)).entries()
    target = tmp_path / "elsewhere.gobj"
    os.replace(entry, target)
    os.symlink(target, entry)
    cf = graphc.compile(f, disk_cache=str(d))
    with pytest.warns(cache.DiskCacheWarning):
        np.testing.assert_array_equal(cf(np.ones(2)), [0.0, 0.0])
    assert cf._entry_for((np.ones(2),)).stages["_executable"].cache_status != "disk-hit"


def test_settings_env_var_and_defaults(tmp_path, quiet_env):
    quiet_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_cache_dir() == str(tmp_path / "xdg" / "graphc")
    quiet_env.delenv("XDG_CACHE_HOME")
    quiet_env.setenv("HOME", str(tmp_path / "home"))
    assert cache.default_cache_dir() == str(tmp_path / "home" / ".cache" / "graphc")
    assert cache.disk_cache_dir() is None
    assert cache.resolve_disk_cache(None) is None
    x = np.ones(3)
    cf = graphc.compile(lambda x: x * 7)
    cf(x)
    assert cf._entry_for((x,)).stages["_executable"].cache_status == "compiled"
    env_dir = tmp_path / "from_env"
    quiet_env.setenv(cache.ENV_VAR, str(env_dir))
    cf = graphc.compile(lambda x: x * 7)
    cf(x)
    assert cf._entry_for((x,)).stages["_executable"].cache_status == "disk-stored"
    off = graphc.compile(lambda x: x * 7, disk_cache=False)      # explicit off wins
    off(x)
    assert off._entry_for((x,)).stages["_executable"].cache_status == "compiled"
    quiet_env.delenv(cache.ENV_VAR)
    on = cache.enable_disk_cache(tmp_path / "enabled")
    cf = graphc.compile(lambda x: x * 7)
    cf(x)
    assert cf._entry_for((x,)).stages["_executable"].cache_status == "disk-stored"
    assert on.path == str(tmp_path / "enabled") and len(on.entries()) == 1
    cache.disable_disk_cache()
    with pytest.raises(TypeError, match="disk_cache"):
        graphc.compile(lambda x: x, disk_cache=3)


def test_cache_never_unpickles(tmp_path, quiet_env):
    """An entry holding a pickle (or anything else) is rejected by format, not executed."""
    import pickle
    d = tmp_path / "c"
    f = lambda x: x / 2  # noqa: E731
    graphc.compile(f, disk_cache=str(d))(np.ones(2))
    (entry,) = cache.DiskCache(str(d)).entries()
    sentinel = tmp_path / "pwned"
    payload = pickle.dumps(eval)  # noqa: S301 - the point: it must never be loaded
    with open(entry, "wb") as fh:
        fh.write(payload)
    cf = graphc.compile(f, disk_cache=str(d))
    with pytest.warns(cache.DiskCacheWarning, match="bad magic"):
        np.testing.assert_array_equal(cf(np.ones(2)), [0.5, 0.5])
    assert not sentinel.exists()
    src = open(cache.__file__).read()
    assert "pickle" not in src.replace("unpickled", "").replace("Nothing is unpickled", "")
