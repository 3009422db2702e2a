"""The layering of graphc (docs/architecture.md): every import, also inside functions,
points down the list of rooms, so a backward import fails here, and there is no import
cycle at all in either package.  eager's own rules are in tests/eager/test_layering.py."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]

# bottom to top; a module belongs to the first room whose prefix it starts with
ROOMS = [
    ("base", ("graphc.errors", "graphc.pytree", "graphc.aliasing", "graphc._version")),
    ("ir", ("graphc.ir", "graphc.interpreter")),
    ("tracer", ("graphc.layout", "graphc.capture", "graphc.tracer")),
    ("autodiff", ("graphc.autodiff", "graphc.batching")),
    ("passes", ("graphc.passes",)),
    ("backend", ("graphc.backend",)),
    ("runtime", ("graphc.runtime",)),
    ("api", ("graphc.signature", "graphc.autograd_bridge", "graphc.cond", "graphc.loops",
             "graphc.transforms", "graphc.api", "graphc.entry", "graphc.inspection",
             "graphc.forward")),
    ("onnx", ("graphc.onnx",)),
    ("tools", ("graphc.tools",)),
    ("top", ("graphc.__main__", "graphc")),
]


def _modules() -> dict:
    out = {}
    for pkg in ("eager", "graphc"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            rel = p.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


MODS = _modules()


def room(mod: str) -> int:
    for rank, (_, prefixes) in enumerate(ROOMS):
        if any(mod == p or mod.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"{mod} belongs to no room: add it to ROOMS and docs/architecture.md")


def _imports(mod: str, path: Path):
    """(imported module, line) for every import in the file, inside functions too."""
    is_pkg = path.name == "__init__.py"
    base = mod if is_pkg else mod.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                b = base
                for _ in range(node.level - 1):
                    b = b.rsplit(".", 1)[0]
                target = b + ("." + node.module if node.module else "")
            else:
                target = node.module
            yield target, node.lineno
            for a in node.names:
                yield f"{target}.{a.name}", node.lineno


@functools.cache
def _graph() -> nx.DiGraph:
    """The import graph of eager/ and graphc/, built once per process when a test first
    asks (parsing every module at import made collection pay it in every pytest-xdist
    worker)."""
    g = nx.DiGraph()
    for mod, path in MODS.items():
        g.add_node(mod)
        for target, line in _imports(mod, path):
            if target in MODS and target != mod:
                g.add_edge(mod, target, line=line)
    return g


def test_every_graphc_module_has_a_room():
    for mod in MODS:
        if mod.startswith("graphc"):
            room(mod)


def test_graphc_imports_only_point_down():
    bad = []
    for a, b, data in _graph().edges(data=True):
        if a.startswith("graphc") and b.startswith("graphc") and room(b) > room(a):
            bad.append(f"{a} ({ROOMS[room(a)][0]}) imports {b} ({ROOMS[room(b)][0]}) at line "
                       f"{data['line']}")
    assert not bad, "imports that point up the layers:\n" + "\n".join(sorted(bad))


def test_no_import_cycle_anywhere():
    cycles = sorted(sorted(c) for c in nx.strongly_connected_components(_graph()) if len(c) > 1)
    assert not cycles, cycles


def test_eager_never_imports_graphc():
    bad = [(a, b) for a, b in _graph().edges if a.startswith("eager") and b.startswith("graphc")]
    assert not bad, bad


def test_the_check_finds_a_backward_import():
    """The test itself works: an import of the api from the IR is reported."""
    g = _graph().copy()
    g.add_edge("graphc.ir.graph", "graphc.api", line=1)
    bad = [(a, b) for a, b in g.edges if a.startswith("graphc") and b.startswith("graphc")
           and room(b) > room(a)]
    assert ("graphc.ir.graph", "graphc.api") in bad
