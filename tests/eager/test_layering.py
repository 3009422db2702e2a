"""The layering of eager, and what graphc may use of it (docs/eager-layers.md).

Every ``.py`` under eager/ and graphc/ is parsed with ``ast``; every import counts,
also one inside a function.  An import ``from a.b import c`` is an edge to ``a.b`` and,
when ``a.b.c`` is a module, to ``a.b.c``; ``from . import x`` inside a package's
submodule is therefore an edge to the package itself, whose ``__init__`` imports its
submodules -- which is why eager's modules import their siblings by full name or by
``from .x import name``.

(a) eager never imports graphc: the compiler sits on top of the eager library.
(b) eager's modules import one way: no cycle (no strongly connected component of
    more than one module) in the graph of eager modules.
(c) graphc imports eager only as ``eager`` (the public, PyTorch-style API: factories,
    ``eager.no_grad``, ``eager.Tensor``, ``eager.autograd.Function``...) and
    ``eager.interop`` (what eager exports on purpose for a compiler: raw accessors,
    the op registry, the thread-local switches a trace flips).  The smallest list that
    lets graphc work: everything graphc needs beyond the user API is named once in
    ``eager.interop``.  An attribute chain ``eager.a.b`` that reaches into a submodule
    (``eager.autograd.engine.X``, ``eager.tensor.PINNED``) or a private name
    (``eager._dtype``) counts as such an import.
(d) graphc never touches a tensor's private fields ``_data``, ``_rg``, ``_grad`` or
    ``_version`` directly: it uses ``eager.interop``'s accessors.  The one exception is
    an access on ``self``: a graphc class's own fields (``Tracer`` keeps ``_rg`` and
    ``_grad`` named like Tensor's so the shared op surface and the accessors read
    both; the native runner keeps its own ``_data``).
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
GRAPHC_MAY_IMPORT = {"eager", "eager.interop"}
PUBLIC_PACKAGES = {"eager.autograd", "eager.nn", "eager.optim"}   # torch.autograd & co.
PRIVATE_FIELDS = {"_data", "_rg", "_grad", "_version"}


def _modules() -> dict:
    mods = {}
    for pkg in ("eager", "graphc"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if name.endswith(".__init__"):
                name = name[: -len(".__init__")]
            mods[name] = path
    return mods


MODS = _modules()


@functools.cache
def _trees() -> dict:
    """Every module's parsed source, once per process, when a test first asks: parsing
    all of eager/ and graphc/ at import made collection (in every pytest-xdist worker)
    pay seconds for the few tests that read it."""
    return {m: ast.parse(p.read_text(encoding="utf-8"), str(p)) for m, p in MODS.items()}


def _targets(mod: str, node) -> list:
    """The modules an import statement of module ``mod`` imports."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = mod if MODS[mod].name == "__init__.py" else mod.rsplit(".", 1)[0]
            for _ in range(node.level - 1):
                base = base.rsplit(".", 1)[0]
            m = base + ("." + node.module if node.module else "")
        else:
            m = node.module
        names = [m] + [f"{m}.{a.name}" for a in node.names]
    return [n for n in names if n in MODS and n != mod]


@functools.cache
def _graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for mod, tree in _trees().items():
        g.add_node(mod)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(mod, node):
                    g.add_edge(mod, t, line=node.lineno)
    return g


def _is(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def test_the_scan_sees_both_packages():
    assert {"eager", "eager.tensor", "eager.interop", "eager.surface", "graphc",
            "graphc.tracer"} <= set(MODS)
    assert _graph().has_edge("eager", "eager.tensor")


def test_eager_never_imports_graphc():
    bad = [(a, b, _graph().edges[a, b]["line"]) for a, b in _graph().edges
           if _is(a, "eager") and _is(b, "graphc")]
    assert not bad, bad


def test_eager_has_no_import_cycle():
    sub = _graph().subgraph([m for m in _graph() if _is(m, "eager")])
    cycles = [sorted(c) for c in nx.strongly_connected_components(sub) if len(c) > 1]
    detail = [(a, b) for c in cycles for a, b in sorted(sub.subgraph(c).edges)]
    assert not cycles, (cycles, detail)


def _eager_chains(tree) -> list:
    """``eager.a.b...`` attribute chains: (dotted name, line), longest chains only."""
    out = []
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            parts, v = [node.attr], node.value
            while isinstance(v, ast.Attribute):
                inner.add(id(v))
                parts.append(v.attr)
                v = v.value
            if isinstance(v, ast.Name) and v.id == "eager":
                out.append((".".join(["eager"] + parts[::-1]), node.lineno))
    return out


def _reaches_inside(chain: str) -> bool:
    parts = chain.split(".")
    if parts[1].startswith("__") and parts[1].endswith("__"):
        return False                         # module metadata (eager.__file__), not internals
    if parts[1].startswith("_"):
        return True
    for i in range(3, len(parts) + 1):       # eager.a.b: a submodule of a package
        prefix = ".".join(parts[:i])
        if prefix in MODS and prefix not in GRAPHC_MAY_IMPORT:
            return True
    return (len(parts) > 2 and ".".join(parts[:2]) in MODS
            and ".".join(parts[:2]) not in PUBLIC_PACKAGES | GRAPHC_MAY_IMPORT)


def test_graphc_uses_eager_only_through_its_public_api_and_interop():
    bad = [(a, b, _graph().edges[a, b]["line"]) for a, b in _graph().edges
           if _is(a, "graphc") and _is(b, "eager") and b not in GRAPHC_MAY_IMPORT]
    for mod, tree in _trees().items():
        if _is(mod, "graphc"):
            bad += [(mod, chain, line) for chain, line in _eager_chains(tree)
                    if _reaches_inside(chain)]
    assert not bad, bad


def test_graphc_never_touches_a_tensors_private_fields():
    bad = []
    for mod, tree in _trees().items():
        if not _is(mod, "graphc"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE_FIELDS and not (
                    isinstance(node.value, ast.Name) and node.value.id == "self"):
                bad.append((mod, node.lineno, node.attr))
    assert not bad, bad


@pytest.mark.parametrize("chain,inside", [
    ("eager.no_grad", False), ("eager.tensor", False), ("eager.autograd.Function", False),
    ("eager.interop.data_of", False), ("eager.autograd.engine.NO_GRAD_HINTS", True),
    ("eager.tensor.PINNED", True), ("eager._dtype", True), ("eager.ops.OPS", True)])
def test_the_chain_rule(chain, inside):
    assert _reaches_inside(chain) is inside
