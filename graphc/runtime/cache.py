"""Caches of compiled code beyond one CompiledFunction's per-signature dict.

Two caches live here:

* **Engine LRU** (always on).  Every native cache entry of every
  ``CompiledFunction`` holds a JIT engine (machine code plus LLVM's and
  llvmlite's bookkeeping).  A process that keeps producing new signatures
  would grow without bound, so the entries are registered here and, past
  :func:`engine_limit` (default :data:`DEFAULT_ENGINE_LIMIT`), the least
  recently *called* one is dropped from its function's cache; a later call
  with that signature re-traces (or loads from the disk cache).  Eviction only
  drops references: a call in flight holds its entry, so its engine stays
  alive until the call returns and the last reference goes.

* **Disk cache** (opt-in).  ``graphc.compile(fn, disk_cache=True)``,
  :func:`enable_disk_cache` or the environment variable ``GRAPHC_CACHE_DIR``
  store the object code of each compiled graph, so another process (or a
  re-trace after eviction) skips LLVM's optimiser and code generator.  The
  key is a sha256 of the optimized graph (ops, attributes, constants, shapes,
  dtypes; not source lines or the function name), the opt level, the package
  version, a hash of the backend's own source, and the host CPU / LLVM /
  llvmlite key.  Files are written atomically with a header (magic, format
  version, key, payload size, payload sha256); a bad entry is removed and
  recompiled.  Nothing is unpickled: the header is JSON, the payload is the
  object file, and the call plan is recomputed from the graph.

  Trust policy (loading object code is running it).  The directory must be
  owned by this user and not writable by group or others, else the cache is
  off for the process (a warning says why); a symlink to such a directory is
  followed, and the check applies to its target.  Because the directory could
  still be swapped after that check, every entry is checked on its own: it is
  ``lstat``-ed and then opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO, device
  or symlink at an entry's path is never followed nor waited on) and must be a
  regular file owned by this user, the same file both times.  Anything else is
  a miss and is left alone: only our own regular files are ever removed or
  replaced.  A tampered entry (bad magic, header, size, key or checksum) is a
  miss too, and is removed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import stat
import tempfile
import threading
import time
import warnings
import weakref
from typing import Any, Optional, Union

__all__ = [
    "DEFAULT_ENGINE_LIMIT",
    "set_engine_limit",
    "engine_limit",
    "live_engines",
    "evictions",
    "DiskCache",
    "DiskCacheWarning",
    "enable_disk_cache",
    "disable_disk_cache",
    "disk_cache_dir",
    "default_cache_dir",
    "resolve_disk_cache",
]

# ---------------------------------------------------------------------------------------
# engine LRU

DEFAULT_ENGINE_LIMIT = 512

_lru_lock = threading.Lock()
_limit: Optional[int] = DEFAULT_ENGINE_LIMIT
_live: dict = {}  # token -> (weakref to entry, weakref to owner); under _lru_lock
_dead: list = []  # tokens of entries garbage collected (appended lock-free)
_tokens = itertools.count(1)
_evicted = [0]

#: ``entry.stamp = tick()`` on every call: a global, monotonically increasing use counter.
tick = itertools.count(1).__next__


def set_engine_limit(n: Optional[int]) -> None:
    """At most ``n`` live native entries process-wide (``None``: no limit).

    Lowering the limit evicts the least recently used entries at once.
    """
    global _limit
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise ValueError(f"engine limit must be a positive int or None, got {n!r}")
    _limit = n
    _enforce(keep=None)


def engine_limit() -> Optional[int]:
    """The current limit of live native entries (``None``: unlimited)."""
    return _limit


def live_engines() -> int:
    """How many native entries the LRU currently tracks (alive and cached)."""
    with _lru_lock:
        _drain()
        return len(_live)


def evictions() -> int:
    """How many entries the LRU has evicted in this process."""
    return _evicted[0]


def _drain() -> None:
    """Forget entries the garbage collector freed (caller holds ``_lru_lock``)."""
    while _dead:
        _live.pop(_dead.pop(), None)


def register(owner: Any, entry: Any) -> None:
    """Track a new native cache entry of ``owner`` (a CompiledFunction); evict past the limit.

    ``owner._evict_entry(entry)`` must drop the entry from its cache and
    return True, or return False when it cannot right now (it is busy).
    """
    entry.stamp = tick()
    token = next(_tokens)
    # the weakref callback may run in any thread at any moment (even inside this module,
    # when an allocation triggers the GC): it only appends to a list
    ref = weakref.ref(entry, lambda _r, t=token: _dead.append(t))
    with _lru_lock:
        _live[token] = (ref, weakref.ref(owner))
    _enforce(keep=token)


def _enforce(keep: Optional[int]) -> None:
    limit = _limit
    if limit is None or len(_live) <= limit:
        return
    victims = []
    with _lru_lock:
        _drain()
        cands = []
        for token, (eref, oref) in list(_live.items()):
            e, o = eref(), oref()
            if e is None or o is None:  # owner gone: whoever still holds the entry owns it
                _live.pop(token, None)
                continue
            cands.append((e.stamp, token, e, o))
        cands.sort(key=lambda c: (c[0], c[1]))
        excess = len(cands) - limit
        for _, token, e, o in cands:
            if excess <= 0:
                break
            if token == keep:
                continue
            # the owner's lock is only *tried*: blocking on another function's lock while
            # holding ours could deadlock with a thread that compiles there
            if o._evict_entry(e):
                _live.pop(token, None)
                victims.append(e)
                excess -= 1
        _evicted[0] += len(victims)
        cands = e = o = None
    # the last references (and with them the engines) go here, outside the lock
    victims.clear()


# ---------------------------------------------------------------------------------------
# disk cache

FORMAT_VERSION = 1
MAGIC = b"GRAPHC-OBJECT-CODE\n"
SUFFIX = ".gobj"
MAX_HEADER = 4096
MAX_PAYLOAD = 256 * 1024 * 1024
ENV_VAR = "GRAPHC_CACHE_DIR"


class DiskCacheWarning(RuntimeWarning):
    """The disk cache refused a directory or found a bad entry (it recompiles; nothing breaks)."""


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/graphc``, else ``~/.cache/graphc``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "graphc")


_global_path: Optional[str] = None  # set by enable_disk_cache
_instances: dict = {}
_instances_lock = threading.Lock()


def _new_locks_in_child() -> None:
    """Locks a thread of the parent held at fork stay held forever in the child (that
    thread does not exist there): the child starts with fresh ones."""
    global _lru_lock, _instances_lock
    _lru_lock = threading.Lock()
    _instances_lock = threading.Lock()
    for dc in list(_instances.values()):
        dc._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_in_child)


def enable_disk_cache(path: Optional[Union[str, os.PathLike]] = None) -> "DiskCache":
    """Turn the disk cache on for every compiled function that does not say otherwise."""
    global _global_path
    cache = _instance(os.fspath(path) if path is not None else default_cache_dir())
    _global_path = cache.path
    return cache


def disable_disk_cache() -> None:
    """Undo :func:`enable_disk_cache` (``GRAPHC_CACHE_DIR`` still applies when set)."""
    global _global_path
    _global_path = None


def disk_cache_dir() -> Optional[str]:
    """Directory of the process-wide disk cache, or None when it is off."""
    if _global_path is not None:
        return _global_path
    env = os.environ.get(ENV_VAR)
    return os.path.abspath(os.path.expanduser(env)) if env else None


def resolve_disk_cache(setting: Any) -> Optional["DiskCache"]:
    """The DiskCache for a ``compile(disk_cache=...)`` setting.

    ``None`` follows the process-wide setting (:func:`enable_disk_cache` or
    ``GRAPHC_CACHE_DIR``), ``False`` is off, ``True`` is on (the process-wide
    directory or the default one), a path is that directory.
    """
    if setting is False:
        return None
    if setting is None:
        path = disk_cache_dir()
        return _instance(path) if path is not None else None
    if setting is True:
        return _instance(disk_cache_dir() or default_cache_dir())
    if isinstance(setting, (str, os.PathLike)):
        return _instance(os.fspath(setting))
    raise TypeError(f"disk_cache must be None, True, False or a directory path, got {setting!r}")


def _instance(path: str) -> "DiskCache":
    path = os.path.abspath(os.path.expanduser(path))
    with _instances_lock:
        inst = _instances.get(path)
        if inst is None:
            inst = _instances[path] = DiskCache(path)
        return inst


_backend_hash: Optional[str] = None


def _code_generator_files(root: str) -> list:
    """Every source file the generated code depends on, relative to ``root``, in a fixed
    order: the whole backend (its subpackages too: the lowering table), the runtime's
    engine, entry point and pool, and the random op's constants the Philox kernel uses."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, "graphc", "backend")):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        out += [
            os.path.relpath(os.path.join(dirpath, f), root) for f in filenames if f.endswith(".py")
        ]
    out += [
        os.path.join("graphc", "runtime", f) for f in ("llvm_engine.py", "native.py", "pool.py")
    ]
    out.append(os.path.join("eager", "ops", "random.py"))
    return sorted(out)


def _backend_source_hash() -> str:
    """sha256 of the code generator's own source: an edited backend never reuses old code."""
    global _backend_hash
    if _backend_hash is None:
        here = os.path.dirname(os.path.abspath(__file__))
        root = os.path.dirname(os.path.dirname(here))  # the directory holding graphc/, eager/
        h = hashlib.sha256()
        for rel in _code_generator_files(root):
            h.update(rel.encode() + b"\0")
            with open(os.path.join(root, rel), "rb") as fh:
                h.update(fh.read())
        _backend_hash = h.hexdigest()
    return _backend_hash


def graph_key_text(graph) -> str:
    """The optimized graph as canonical JSON, without what cannot change the code.

    Source lines and the function name only reach comments, so editing a
    comment above the function does not invalidate its entry.
    """
    doc = json.loads(graph.to_json())
    doc.pop("name", None)
    for node in doc["nodes"]:
        node.pop("src", None)
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


class DiskCache:
    """Object code per key in one per-user directory (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._checked: Optional[bool] = None
        self._lock = threading.Lock()
        self.hits = self.misses = self.stores = self.rejected = 0

    def __repr__(self) -> str:
        return (
            f"<graphc DiskCache {self.path!r} hits={self.hits} misses={self.misses} "
            f"stores={self.stores} rejected={self.rejected}>"
        )

    # --- the directory -----------------------------------------------------------
    def usable(self) -> bool:
        """Create the directory (mode 0700) once and check it is safe to use."""
        if self._checked is None:
            with self._lock:
                if self._checked is None:
                    problem = self._prepare()
                    if problem is not None:
                        warnings.warn(
                            f"graphc: disk cache disabled: {problem}",
                            DiskCacheWarning,
                            stacklevel=2,
                        )
                    self._checked = problem is None
        return self._checked

    def _prepare(self) -> Optional[str]:
        path = self.path
        try:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, mode=0o700, exist_ok=True)
            try:
                os.mkdir(path, 0o700)
                os.chmod(path, 0o700)  # the umask may have removed bits; never adds any
            except FileExistsError:
                pass
            st = os.stat(path)
        except OSError as e:
            return f"cannot create {path!r}: {e}"
        if not stat.S_ISDIR(st.st_mode):
            return f"{path!r} is not a directory"
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return (
                f"{path!r} is owned by uid {st.st_uid}, not by this user "
                f"(uid {os.getuid()}); another user could plant object code there"
            )
        if st.st_mode & 0o022:
            return (
                f"{path!r} is writable by group or others (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); chmod 700 it to use it as a cache"
            )
        return None

    # --- keys -----------------------------------------------------------------------
    def key(self, graph, opt_level: int, **codegen: Any) -> str:
        """sha256 hex of everything that decides the machine code of ``graph``.

        ``codegen`` holds the executable's code generation options (``fuse``,
        ``poison``...): JSON-able values that change the generated code.
        """
        from . import llvm_engine
        from .._version import __version__
        from ..backend import blas

        parts = {
            "format": FORMAT_VERSION,
            "graph": graph_key_text(graph),
            "opt_level": int(opt_level),
            "codegen": {k: codegen[k] for k in sorted(codegen)},
            "graphc": __version__,
            "backend_source": _backend_source_hash(),
            "host": llvm_engine.host_cpu_key(),
            "blas": blas.available(),
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def runtime_key(self, name: str, **codegen: Any) -> str:
        """sha256 hex for one of graphc's own process-wide modules (the worker pool).

        Like :meth:`key` without a graph: the module's ``name``, the format,
        graphc's version, the backend's source hash (``pool.py`` is part of it),
        the host CPU / triple / LLVM / llvmlite key, and ``codegen`` (JSON-able
        facts of the host the module's code depends on).
        """
        from . import llvm_engine
        from .._version import __version__

        parts = {
            "format": FORMAT_VERSION,
            "runtime_module": str(name),
            "codegen": {k: codegen[k] for k in sorted(codegen)},
            "graphc": __version__,
            "backend_source": _backend_source_hash(),
            "host": llvm_engine.host_cpu_key(),
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def file_for(self, key: str) -> str:
        return os.path.join(self.path, key + SUFFIX)

    # --- entries --------------------------------------------------------------------
    def load(self, key: str) -> Optional[bytes]:
        """The verified object code for ``key``, or None (see the trust policy in the
        module docstring: never blocks, never follows a link, removes only our files)."""
        if not self.usable():
            return None
        fname = self.file_for(key)
        try:
            before = os.lstat(fname)
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError as e:
            self._reject(fname, f"cannot stat it ({e})", remove=False)
            return None
        if not _ours(before):  # not even opened: a FIFO would block, a device act
            self._reject(fname, "not a regular file owned by this user", remove=False)
            return None
        try:
            fd = os.open(fname, _OPEN_FLAGS)
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError as e:
            self._reject(fname, f"cannot open it ({e})", remove=False)
            return None
        try:
            st = os.fstat(fd)
            if not _ours(st) or (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino):
                self._reject(fname, "not a regular file owned by this user", remove=False)
                return None
            if st.st_size > MAX_PAYLOAD + MAX_HEADER:
                self._reject(fname, f"{st.st_size} bytes is larger than any object code")
                return None
            with os.fdopen(fd, "rb") as fh:
                fd = -1
                blob = fh.read(MAX_PAYLOAD + MAX_HEADER + 1)
        except OSError as e:
            self._reject(fname, f"cannot read it ({e})", remove=False)
            return None
        finally:
            if fd >= 0:
                os.close(fd)
        payload, problem = self._parse(blob, key)
        if problem is not None:
            self._reject(fname, problem)
            return None
        self.hits += 1
        return payload

    @staticmethod
    def _parse(blob: bytes, key: str) -> tuple:
        if not blob.startswith(MAGIC):
            return None, "bad magic (not a graphc cache entry)"
        end = blob.find(b"\n", len(MAGIC), len(MAGIC) + MAX_HEADER)
        if end < 0:
            return None, "header missing or truncated"
        try:
            header = json.loads(blob[len(MAGIC) : end].decode("utf-8"))
        except (ValueError, RecursionError):  # also nesting, ints of > 4300 digits
            return None, "header is not valid JSON"
        if not isinstance(header, dict):
            return None, "header is not a JSON object"
        if header.get("format") != FORMAT_VERSION:
            return None, f"format version {header.get('format')!r}, expected {FORMAT_VERSION}"
        if header.get("key") != key:
            return None, "entry belongs to another key (foreign or renamed file)"
        payload = blob[end + 1 :]
        size = header.get("size")
        if not isinstance(size, int) or size != len(payload) or size == 0:
            return None, f"payload is {len(payload)} bytes, header says {size!r} (truncated?)"
        if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            return None, "payload checksum mismatch (corrupted)"
        return payload, None

    def _reject(self, fname: str, why: str, remove: bool = True) -> None:
        self.rejected += 1
        self.misses += 1
        if remove:
            _remove_ours(fname)
        warnings.warn(
            f"graphc: ignoring disk cache entry {fname}: {why}; recompiling",
            DiskCacheWarning,
            stacklevel=3,
        )

    def store(self, key: str, payload: bytes, name: str = "") -> bool:
        """Write an entry atomically (temp file in the same directory, then rename)."""
        if not payload or not self.usable():
            return False
        header = {
            "format": FORMAT_VERSION,
            "key": key,
            "size": len(payload),
            "sha256": hashlib.sha256(payload).hexdigest(),
            "name": str(name)[:200],
            "created": int(time.time()),
        }
        blob = MAGIC + json.dumps(header, separators=(",", ":")).encode() + b"\n" + payload
        fname = self.file_for(key)
        try:
            there = os.lstat(fname)
        except OSError:
            there = None
        if there is not None and not _ours(there):
            warnings.warn(
                f"graphc: not replacing {fname}: it is not a regular file owned by this user",
                DiskCacheWarning,
                stacklevel=2,
            )
            return False
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.path)
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
            os.replace(tmp, fname)
            tmp = None
        except OSError as e:
            warnings.warn(
                f"graphc: could not write disk cache entry in {self.path}: {e}",
                DiskCacheWarning,
                stacklevel=2,
            )
            return False
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        self.stores += 1
        return True

    def entries(self) -> list:
        """Paths of the entries currently stored."""
        try:
            return sorted(
                os.path.join(self.path, f)
                for f in os.listdir(self.path)
                if f.endswith(SUFFIX) and not f.startswith(".")
            )
        except OSError:
            return []

    def clear(self) -> int:
        """Remove every entry (our own regular files only); returns how many."""
        return sum(_remove_ours(p) for p in self.entries())


_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOCTTY", 0)
)


def _ours(st: os.stat_result) -> bool:
    """A regular file owned by this user (``st`` from lstat or fstat)."""
    return stat.S_ISREG(st.st_mode) and (not hasattr(os, "getuid") or st.st_uid == os.getuid())


def _remove_ours(fname: str) -> bool:
    """Unlink ``fname`` if it is our own regular file (never a link, FIFO or foreign file)."""
    try:
        if _ours(os.lstat(fname)):
            os.unlink(fname)
            return True
    except OSError:
        pass
    return False


def _release_ir(module) -> None:
    """Break the reference cycles of an llvmlite module nothing uses any more (parent
    links: instruction <-> block <-> function <-> module, a block's terminator back to
    it, phi nodes around loops, functions' arguments), so reference counting frees it
    when the last name goes instead of the cyclic garbage collector having to walk its
    tens of thousands of objects (W8's step: ~190 ms of collections in its first two
    calls)."""
    for gv in list(module.globals.values()):
        blocks = getattr(gv, "blocks", None)
        if blocks is None:
            continue
        for blk in blocks:
            for ins in blk.instructions:
                if hasattr(ins, "incomings"):
                    ins.incomings = []
            blk.instructions = []
            blk.terminator = None
        gv.blocks = []
        gv.args = ()
        gv.return_value = None
    module.globals.clear()
    module.metadata = []
    module.namedmetadata = {}
    module._metadatacache = {}


def load_or_compile(
    module_factory,
    disk: Optional[DiskCache],
    key: Optional[str],
    opt_level: int,
    name: str,
    *,
    fast_regalloc: bool = False,
):
    """(JitModule, how) for a plan: from the disk cache when possible, else compiled.

    ``module_factory()`` builds the llvmlite module (only called on a miss);
    ``fast_regalloc`` is passed on to ``llvm_engine.compile_module`` (quick-tier code).
    The module the factory returns is emptied after compiling (:func:`_release_ir`):
    it must be one built for this call, not one the caller uses again;
    ``how`` is ``"compiled"``, ``"disk-hit"`` or ``"disk-stored"``.

    Freshly compiled code lives in a small engine made from its object file alone
    (``llvm_engine.compile_module`` never keeps the LLVM module: an MCJIT engine
    holding it takes about 0.8 MB for a small graph, the small one about 60 KB), so a
    process holding the default 512 live signatures stays near 100 MB instead of 500.
    The IR texts are kept, so ``llvm_ir()`` and ``asm()`` still work.
    """
    from . import llvm_engine

    if disk is not None and key is not None:
        payload = disk.load(key)
        if payload is not None:
            from ..backend import blas

            blas.available()  # the code may call gemm: its symbol must be registered
            try:
                return llvm_engine.load_object_code(payload, name=name), "disk-hit"
            except llvm_engine.JitError as e:  # verified bytes LLVM still refuses: recompile
                disk._reject(disk.file_for(key), str(e))
    module = module_factory()
    try:
        mod = llvm_engine.compile_module(module, opt_level, name=name, fast_regalloc=fast_regalloc)
    finally:
        if not isinstance(module, str):
            _release_ir(module)  # built for this compile: its text is all that is used
        module = None
    how = "compiled"
    if disk is not None and key is not None and disk.store(key, mod.object_code(), name):
        how = "disk-stored"
    return mod, how
