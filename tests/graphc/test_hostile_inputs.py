"""Hostile inputs end in a clean error: never code execution, a crash or a hang.

Sections (add cases to the section they belong to):

1. LLVM IR injection.  Graph names, input names and source lines come from the
   user or from a graph file and reach the generated IR as comments; they get
   there only escaped (``graphc.backend.irtext``), and the JSON loader refuses
   control characters in every string field.
2. Malformed graph JSON.  ``Graph.from_json`` returns a Graph or raises
   GraphFormatError whatever the document holds: nesting, huge integers and
   shapes, wrong types, random mutations of valid documents.
3. Disk cache entries.  Tampered, foreign, FIFO or symlinked entries are clean
   misses, and only our own regular files are ever removed or replaced.
4. Native entry and planner (spoofed array types, size overflows).  Also
   covered elsewhere, not repeated here: objects faking ``__class__``, int
   subclasses and ndarray subclasses at the native entry
   (runtime/test_native_safety.py), huge expands, arenas and constants
   (ir/test_size_limits.py), huge ``--args`` of the CLI (tests/test_cli.py),
   bool indices whose shape depends on values (test_api_robustness.py).

Cases that could crash or hang the interpreter run in a subprocess
(:func:`run_isolated`), which must exit normally, never by a signal.
"""
from __future__ import annotations

import copy
import json
import os
import random
import re
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import eager as torch
import graphc
from graphc.backend import irtext
from graphc.ir import Graph
from graphc.runtime import cache, llvm_engine as jit
from graphc.runtime.native import NativeExecutable

REPO = Path(__file__).resolve().parents[2]


def run_isolated(code: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter on this checkout; it must not die by a signal.
    (The timeout only turns a hang into a failure.)"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode >= 0, f"killed by signal {-r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


# ---------------------------------------------------------------------------------------
# 1. LLVM IR injection

# Characters that end a line somewhere (LLVM ends a comment at \n and \r; a NUL ends the C
# string llvmlite hands to LLVM) or have no business in a name
CONTROL = ["\r", "\n", "\x0b", "\x0c", "\x00", "\x1b", "\x7f", "\x85", "\x9f", "\u2028",
           "\u2029", "\ud800"]


def system_payload(marker: str, sep: str = "\r") -> str:
    """A source location that, written unescaped into the comment at the top of kernel
    k0_loop(in0, n1), ends the comment, calls system("touch <marker>"), closes the kernel,
    declares what it used and opens a dummy function for the rest of the kernel's body."""
    cmd = f"touch {marker}"
    lines = ['  %"pwn" = call i32 @system(ptr @cmd)', "  ret i32 0", "}",
             f'@cmd = private constant [{len(cmd) + 1} x i8] c"{cmd}\\00"',
             "declare i32 @system(ptr)",
             'define internal i32 @junk(ptr %"in0", ptr %"n1") {', "junk:",
             '  %"rc" = alloca i32', ";"]
    return "a" + sep + sep.join(lines)


ASM_PAYLOAD = 'a\r  call void asm sideeffect "ud2", ""()\r;'    # SIGILL if it ever runs


def _hostile_graph(src: str = "", name: str = "g", input_name: str = "x") -> Graph:
    """x + x built with the Graph API (no loader in the way), nodes %0 (input), %1 (add)."""
    g = Graph(name)
    x = g.add_input(input_name, (4,), "float32")
    g.outputs = [g.add_node("add", (x, x), src=src)]
    return g


def _base_doc() -> dict:
    g = Graph("g")
    x = g.add_input("x", (3, 4), "float32")
    y = g.add_input("y", (3, 4), "float32")
    m = g.add_node("mul", (x, y), src="f.py:1")
    g.outputs = [g.add_node("sum", (m,), {"axis": (1,), "keepdim": True}, src="f.py:2",
                            by="simplify")]
    return json.loads(g.to_json())


def _set_field(doc: dict, field: str, value: str) -> None:
    if field == "name":
        doc["name"] = value
    elif field == "input name":
        doc["nodes"][0]["attrs"]["name"] = value
    elif field == "attribute string":
        doc["nodes"][3]["attrs"]["axis"] = value
    else:                                   # src, role, by
        doc["nodes"][2][field] = value


@pytest.mark.parametrize("field", ["name", "input name", "src", "role", "by",
                                   "attribute string"])
@pytest.mark.parametrize("char", CONTROL, ids=[f"U+{ord(c):04X}" for c in CONTROL])
@pytest.mark.parametrize("ascii_only", [True, False], ids=["escaped", "raw"])
def test_loader_refuses_control_characters_in_every_string(field, char, ascii_only):
    doc = _base_doc()
    _set_field(doc, field, f"forward{char}declare i32 @system(ptr)")
    text = json.dumps(doc, ensure_ascii=ascii_only)
    with pytest.raises(graphc.GraphFormatError, match="control character"):
        Graph.from_json(text)


def test_loader_refuses_the_system_injection(tmp_path):
    text = _hostile_graph(system_payload(str(tmp_path / "pwned"))).to_json()
    with pytest.raises(graphc.GraphFormatError, match=r"nodes\[1\] \(%1 = add\): src .* "
                                                      r"control character '\\r'"):
        Graph.from_json(text)


def test_quotes_and_braces_load_and_stay_inert():
    doc = _base_doc()
    _set_field(doc, "src", 'f.py:1 "} declare i32 @system(ptr) ; \\ {')
    _set_field(doc, "name", 'g"}{')
    g = Graph.from_json(json.dumps(doc))
    exe = NativeExecutable(g, 0)
    irtext.check(exe.llvm_ir())
    assert '; ModuleID = "g\\x22}{"' in exe.llvm_ir()
    x = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(exe.run((x, x))[0], np.full((3, 1), 4, np.float32))


@pytest.mark.parametrize("text", CONTROL + ['"', "\\", "}", "\u00e9", "\U0001f600", "\ufeff"])
def test_escape_gives_one_inert_line(text):
    s = irtext.escape(f"a{text}b")
    assert s.isascii() and s.isprintable() and '"' not in s
    irtext.check(s)
    assert s.startswith("a") and s.endswith("b") and len(s) > 2


def test_jit_refuses_ir_text_with_control_characters():
    good = "define i32 @f() {\nentry:\n  ; a comment\n  ret i32 0\n}\n"
    jit.compile_module(good, 0).close()
    for c in ["\r", "\x00", "\x0b", "\x85", "\u2028"]:
        with pytest.raises(jit.JitError, match="refusing to compile.*line 3"):
            jit.compile_module(good.replace("a comment", f"a{c}comment"), 0)


# One subprocess runs every variant: the marker must not appear and every run must end in
# a report (a JitError would mean the escaping missed something).
BISECT_VARIANTS = r"""
    import sys
    import numpy as np
    import graphc
    from graphc.backend import irtext
    from graphc.runtime.native import NativeExecutable
    sys.path.insert(0, sys.argv[2])
    from test_hostile_inputs import _hostile_graph, system_payload

    marker = sys.argv[1]
    x = np.ones(4, np.float32)
    for sep in ["\r", "\n", "\x0b", "\x0c", "\x85", "\u2028", "\u2029", "\x00", '"', "}"]:
        payload = system_payload(marker, sep)
        for g in (_hostile_graph(src=payload), _hostile_graph(name=payload),
                  _hostile_graph(input_name=payload)):
            report = graphc.bisect_passes(g, x)
            assert report.ok and report.baseline is None, str(report)
            exe = NativeExecutable(g, 2)
            for text in (exe.llvm_ir(), exe.llvm_ir(optimized=True), exe.asm()):
                irtext.check(text)
                assert not any(line.lstrip().startswith(('%"pwn"', "declare i32 @system"))
                               for line in text.splitlines())
            np.testing.assert_array_equal(exe.run((x,))[0], x + x)
    print("all variants ok")
"""


def test_injected_names_and_source_lines_never_run(tmp_path):
    marker = tmp_path / "pwned"
    r = run_isolated(BISECT_VARIANTS, str(marker), str(Path(__file__).parent))
    assert r.returncode == 0 and "all variants ok" in r.stdout, r.stderr
    assert not marker.exists()


def test_inline_asm_injection_does_not_abort():
    r = run_isolated(r"""
        import sys
        import numpy as np
        import graphc
        sys.path.insert(0, sys.argv[1])
        from test_hostile_inputs import ASM_PAYLOAD, _hostile_graph
        report = graphc.bisect_passes(_hostile_graph(src=ASM_PAYLOAD), np.ones(4, np.float32))
        print(report.ok, report.baseline)
    """, str(Path(__file__).parent))
    assert r.returncode == 0 and r.stdout.strip() == "True None", r.stderr


def test_compile_with_hostile_function_name_and_file_path(tmp_path):
    # basename(co_filename) becomes the src of every node: no "/" in the payload; the
    # argument name (an input name) is not ASCII
    r = run_isolated(r"""
        import sys
        import numpy as np
        import graphc
        sys.path.insert(0, sys.argv[1])
        from test_hostile_inputs import system_payload
        ns = {}
        src = "def f(x\u00e9):\n    return x\u00e9 + x\u00e9\n"
        exec(compile(src, system_payload("pwned"), "exec"), ns)
        f = ns["f"]
        f.__name__ = system_payload("pwned2")
        f.__qualname__ = f.__name__
        cf = graphc.compile(f)
        x = np.ones(4, np.float32)
        np.testing.assert_array_equal(cf(x), x + x)
        print(graphc.compile(f, disk_cache=sys.argv[2])(x))
    """, str(Path(__file__).parent), str(tmp_path / "cache"), cwd=tmp_path)
    assert r.returncode == 0 and "[2. 2. 2. 2.]" in r.stdout, r.stderr
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


# ---------------------------------------------------------------------------------------
# 2. Malformed graph JSON

def _load_outcome(text) -> str:
    """'graph' or 'refused'; any other exception fails the test."""
    try:
        Graph.from_json(text)
    except graphc.GraphFormatError:
        return "refused"
    return "graph"


def _doc_text(mutate) -> str:
    doc = _base_doc()
    mutate(doc)
    return json.dumps(doc)


def _const_doc(spec: dict, shape: list) -> str:
    def mutate(d):
        d["nodes"].insert(2, {"id": 9, "op": "const", "operands": [],
                              "attrs": {"value": {"$array": spec}}, "shape": shape,
                              "dtype": spec["dtype"], "src": "", "role": "forward",
                              "by": "trace"})
    return _doc_text(mutate)


BIG_INT = "9" * 5000          # json.loads raises ValueError above 4300 digits
HUGE = 2 ** 31 - 1

HOSTILE_DOCS = {
    "deep arrays": "[" * 100_000,
    "deep objects": '{"a":' * 100_000,
    "deep arrays after a valid prefix": '{"format": "graphc-ir", "nodes": ' + "[" * 50_000,
    "deep attribute": _doc_text(lambda d: d["nodes"][3]["attrs"].update(
        axis=json.loads("[" * 90 + "]" * 90))),
    "deep inside a string is fine, then deep for real": '{"name": "' + "[" * 500 + '", "x": '
                                                        + "[" * 5000,
    "5000-digit version": _doc_text(lambda d: None).replace('"version": 1',
                                                           f'"version": {BIG_INT}'),
    "5000-digit node id": _doc_text(lambda d: None).replace('"id": 0', f'"id": {BIG_INT}'),
    "5000-digit dimension": _doc_text(lambda d: None).replace('"shape": [3, 4]',
                                                             f'"shape": [{BIG_INT}, 4]', 1),
    "4000-digit attribute": _doc_text(lambda d: d["nodes"][3]["attrs"].update(
        axis={"$tuple": [10 ** 4000]})),
    "int64 overflow in an attribute": _doc_text(lambda d: d["nodes"][3]["attrs"].update(
        axis={"$tuple": [2 ** 63]})),
    "input of 3 x 2**31-1 dims": _doc_text(lambda d: [d["nodes"][i].update(shape=[HUGE] * 3)
                                                      for i in (0, 1, 2)]),
    "declared node shape overflows": _doc_text(lambda d: d["nodes"][2].update(
        shape=[HUGE] * 4)),
    "expand to 2**31-1 ** 8": _doc_text(lambda d: d["nodes"].append(
        {"id": 4, "op": "expand", "operands": [3], "attrs": {"shape": {"$tuple": [HUGE] * 8}},
         "shape": [HUGE] * 8, "dtype": "float32", "src": "", "role": "forward",
         "by": "trace"})),
    "const whose element count wraps int64": _const_doc(
        {"dtype": "float32", "shape": [65536] * 4, "data": ""}, [65536] * 4),
    "const of 2**31-1 ** 2 elements": _const_doc(
        {"dtype": "float64", "shape": [HUGE, HUGE], "data": ""}, [HUGE, HUGE]),
    "1e400 as a dimension": _doc_text(lambda d: None).replace('"shape": [3, 4]',
                                                             '"shape": [1e400, 4]', 1),
    "NaN literal as a dimension": _doc_text(lambda d: None).replace('"shape": [3, 4]',
                                                                   '"shape": [NaN, 4]', 1),
    "$float nan as a dimension": _doc_text(lambda d: d["nodes"][0].update(
        shape=[{"$float": "nan"}, 4])),
    "$float inf as an axis": _doc_text(lambda d: d["nodes"][3]["attrs"].update(
        axis={"$float": "inf"})),
    "float node id": _doc_text(lambda d: d["nodes"][0].update(id=0.0)),
    "inf operand": _doc_text(lambda d: None).replace('"operands": [0, 1]',
                                                    '"operands": [0, 1e999]'),
    "list as dtype": _doc_text(lambda d: d["nodes"][2].update(dtype=["float32"])),
    "object as dtype": _doc_text(lambda d: d["nodes"][0].update(dtype={"a": 1})),
    "list as array dtype": _const_doc({"dtype": [], "shape": [], "data": ""}, []),
    "non-ASCII base64": _const_doc({"dtype": "float32", "shape": [1], "data": "\u00e9AAA"},
                                   [1]),
    "list as op": _doc_text(lambda d: d["nodes"][2].update(op=["mul"])),
    "surrogate as op": _doc_text(lambda d: d["nodes"][2].update(op="\ud800")),
    "bool version": _doc_text(lambda d: d.update(version=True)),
    "float version": _doc_text(lambda d: d.update(version=1.0)),
    "dict operands": _doc_text(lambda d: d["nodes"][2].update(operands={"0": 1})),
    "list attrs": _doc_text(lambda d: d["nodes"][2].update(attrs=[])),
    "bool axis": _doc_text(lambda d: d["nodes"][3]["attrs"].update(axis=True)),
    "index item with a huge int": _doc_text(lambda d: d["nodes"].append(
        {"id": 4, "op": "getitem", "operands": [3],
         "attrs": {"index": {"$tuple": [{"$tuple": ["i", 10 ** 30]}]}}, "shape": [1],
         "dtype": "float32", "src": "", "role": "forward", "by": "trace"})),
    "long garbage string": _doc_text(lambda d: d.update(name="x" * 100_000)),
    # accepted by the reduction's shape rule, but the backend reads axes as the tracer
    # records them (sorted, non-negative): axis=(-1,) gave wrong sums, then a segfault
    "negative axis": _doc_text(lambda d: d["nodes"][3]["attrs"].update(
        axis={"$tuple": [-1]})),
    "int axis": _doc_text(lambda d: d["nodes"][3]["attrs"].update(axis=1)),
    "null axis": _doc_text(lambda d: d["nodes"][3]["attrs"].update(axis=None)),
    "unsorted axes": _doc_text(lambda d: (d["nodes"][3]["attrs"].update(
        axis={"$tuple": [1, 0]}), d["nodes"][3].update(shape=[1, 1]))),
    # native code truncated the constant (0), eager raises OverflowError
    "fill value out of int32 range": _doc_text(lambda d: d["nodes"].extend([
        {"id": 4, "op": "cast", "operands": [3], "attrs": {"dtype": "int32"}, "shape": [3, 1],
         "dtype": "int32", "src": "", "role": "forward", "by": "trace"},
        {"id": 5, "op": "fill", "operands": [4], "attrs": {"value": 2 ** 40}, "shape": [3, 1],
         "dtype": "int32", "src": "", "role": "forward", "by": "trace"}])),
    # x[index] = v with a v that does not broadcast to the selection: native code read v
    # with strides it does not have
    "setitem value does not broadcast": _doc_text(lambda d: d["nodes"][3].update(
        op="setitem", operands=[0, 1], attrs={"index": {"$tuple": [{"$tuple": ["i", 0]}]}},
        shape=[3, 4])),
    "getitem_grad value does not broadcast": _doc_text(lambda d: d["nodes"][3].update(
        op="getitem_grad", operands=[2], shape=[5, 4], attrs={
            "index": {"$tuple": [{"$tuple": ["s", 0, 2, None]}]},
            "shape": {"$tuple": [5, 4]}})),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_DOCS))
def test_hostile_document_is_a_format_error(case):
    with pytest.raises(graphc.GraphFormatError) as ei:
        Graph.from_json(HOSTILE_DOCS[case])
    msg = str(ei.value)
    assert msg.isprintable() and len(msg) < 2000


def test_non_canonical_axes_are_refused_before_lowering():
    """A graph built in Python is verified before lowering: the same refusal."""
    for axis in [(-1,), 1, None, (1, 0)]:
        g = Graph("g")
        x = g.add_input("x", (3, 4), "float32")
        g.outputs = [g.add_node("sum", (x,), {"axis": axis, "keepdim": True})]
        with pytest.raises(graphc.GraphcError, match="not in the canonical form"):
            NativeExecutable(g, 1)
    g = Graph("g")
    x = g.add_input("x", (3, 4), "float32")
    g.outputs = [g.add_node("argmax", (x,), {"axis": -1, "keepdim": False})]
    with pytest.raises(graphc.GraphcError, match=r"axis=-1 is not in the canonical form 1"):
        NativeExecutable(g, 1)


@pytest.mark.parametrize("value", [2 ** 40, -2 ** 31 - 1, 1e300, float("nan")])
def test_fill_with_a_value_the_dtype_cannot_hold_is_refused(value):
    def f(x):
        y = x + 0
        y.fill_(value)
        return y

    with pytest.raises(OverflowError, match="fill: value .* out of bounds for int32"):
        graphc.compile(f)(np.zeros(3, np.int32))


@pytest.mark.parametrize("bounds", [{"min": 2 ** 40}, {"max": -2 ** 40}])
def test_clamp_with_a_bound_the_dtype_cannot_hold_is_refused(bounds):
    """Eager raises OverflowError; compiled code used to truncate the bound (to 0)."""
    with pytest.raises(OverflowError):
        torch.tensor(np.ones(3, np.int32)).clamp(**bounds)
    with pytest.raises(OverflowError, match="clamp: value .* out of bounds for int32"):
        graphc.compile(lambda x: x.clamp(**bounds))(np.ones(3, np.int32))


@pytest.mark.parametrize("op, shape", [("setitem", (2, 9)), ("getitem_grad", (3, 5))])
def test_assigned_values_must_broadcast_to_the_selection(op, shape):
    g = Graph("g")
    x = g.add_input("x", (3, 4), "float32")
    v = g.add_input("v", shape, "float32")
    i = g.add_input("i", (2,), "int64")
    with pytest.raises(RuntimeError, match=re.escape(f"{op}: shape mismatch: value array of "
                                                     f"shape {list(shape)}")):
        if op == "setitem":
            g.add_node(op, (x, v, i), {"index": (("t", 0),)})
        else:
            g.add_node(op, (v, i), {"index": (("t", 0),), "shape": (3, 4)})


def test_deep_document_is_refused_even_with_a_high_recursion_limit():
    """json.loads recurses in C once per level: nesting is measured before it runs."""
    r = run_isolated("""
        import sys
        import graphc
        sys.setrecursionlimit(10 ** 7)
        for text in ["[" * 3_000_000, '{"a":' * 1_000_000]:
            try:
                graphc.Graph.from_json(text)
            except graphc.GraphFormatError as e:
                print("refused:", str(e)[:60])
    """)
    assert r.returncode == 0 and r.stdout.count("refused: invalid graph JSON: arrays and "
                                                "objects nested") == 2, r.stderr


def test_huge_index_operands_load_without_allocating():
    """The getitem shape rule used to index a dummy with zero arrays of the index operands'
    shapes: 16 GB for a 2**31-1 element index, 16 GB of result for two broadcasting ones.
    Under a 1 GB address-space allowance both documents must load."""
    r = run_isolated("""
        import json, resource
        import graphc

        def node(i, op, operands, attrs, shape, dtype):
            return {"id": i, "op": op, "operands": operands, "attrs": attrs, "shape": shape,
                    "dtype": dtype, "src": "", "role": "forward", "by": "trace"}

        def inp(i, shape, dtype):
            return node(i, "input", [], {"name": f"a{i}", "index": i}, shape, dtype)

        t = lambda k: {"$tuple": ["t", k]}
        docs = [
            [inp(0, [4], "float32"), inp(1, [2 ** 31 - 1], "int64"),
             node(2, "getitem", [0, 1], {"index": {"$tuple": [t(0)]}}, [2 ** 31 - 1],
                  "float32")],
            [inp(0, [4, 4], "float32"), inp(1, [2 ** 17, 1], "int64"),
             inp(2, [1, 2 ** 17], "int32"),
             node(3, "getitem", [0, 1, 2], {"index": {"$tuple": [t(0), t(1)]}},
                  [2 ** 17, 2 ** 17], "float32")],
        ]
        with open("/proc/self/status") as fh:
            vm = [int(l.split()[1]) for l in fh if l.startswith("VmSize")][0] * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + (1 << 30), resource.RLIM_INFINITY))
        for nodes in docs:
            ins = [n["id"] for n in nodes if n["op"] == "input"]
            g = graphc.Graph.from_json(json.dumps(
                {"format": "graphc-ir", "version": 1, "name": "g", "inputs": ins,
                 "outputs": [nodes[-1]["id"]], "nodes": nodes}))
            print(g.nx.nodes[g.outputs[0]]["shape"])
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["(2147483647,)", "(131072, 131072)"]


WEIRD_VALUES = [None, True, False, 0, -1, 1.5, float("inf"), 2 ** 63, 10 ** 30, "", "x",
                "a\rb", "\u2028", "float32", "input", [], [0], [[[]]], [HUGE] * 40, {},
                {"$tuple": [0]}, {"$float": "nan"}, {"$array": {}}, {"a": 1}]


def _paths(doc) -> list:
    """Every (container, key) pair in a JSON document, walked iteratively."""
    out, stack = [], [doc]
    while stack:
        c = stack.pop()
        keys = list(c) if isinstance(c, dict) else range(len(c))
        for k in keys:
            out.append((c, k))
            if isinstance(c[k], (dict, list)):
                stack.append(c[k])
    return out


def _json_text(doc) -> str:
    return json.dumps(doc, allow_nan=True)      # inf becomes "Infinity": refused as well


def test_every_field_with_every_wrong_type():
    base = _base_doc()
    n = len(_paths(base))
    outcomes = {"graph": 0, "refused": 0}
    for i in range(n):
        for v in WEIRD_VALUES:
            doc = copy.deepcopy(base)
            c, k = _paths(doc)[i]
            c[k] = copy.deepcopy(v)
            outcomes[_load_outcome(_json_text(doc))] += 1
    assert outcomes["refused"] > outcomes["graph"] > 0    # some fields take anything short


def _fuzz_bases() -> list:
    def net(x, w1, w2, idx):
        h = (x.mm(w1).clamp(min=0) * 0.5).exp().log()
        return (h.mm(w2)[idx].sum(dim=0, keepdim=True) + h.mean()).transpose(0, 1).sum()

    r = np.random.default_rng(0)
    args = [r.standard_normal((3, 5)).astype(np.float32),
            r.standard_normal((5, 4)).astype(np.float32),
            r.standard_normal((4, 2)).astype(np.float32), np.array([0, 2, 2])]
    g = graphc.trace(net, *args)
    return [_base_doc(), json.loads(g.to_json()), json.loads(g.grad(wrt=[1, 2]).to_json())]


def _mutate(rng: random.Random, doc: dict) -> str:
    """One random structural or textual mutation of a valid document."""
    kind = rng.randrange(6)
    if kind < 4:
        c, k = rng.choice(_paths(doc))
        if kind == 0:
            c[k] = copy.deepcopy(rng.choice(WEIRD_VALUES))
        elif kind == 1 and isinstance(c[k], int) and not isinstance(c[k], bool):
            c[k] = rng.choice([c[k] + 1, c[k] - 1, -c[k], c[k] * 2 ** 31, HUGE, 2 ** 62])
        elif kind == 2:
            if isinstance(c, dict):
                del c[k]
            else:
                c.insert(k, copy.deepcopy(c[k]))
        else:
            c2, k2 = rng.choice(_paths(doc))
            c[k], c2[k2] = copy.deepcopy(c2[k2]), copy.deepcopy(c[k])
        return _json_text(doc)
    text = json.dumps(doc)
    i = rng.randrange(len(text))
    if kind == 4:
        return text[:i] + rng.choice('[]{}",:0-9e\\ \r\x00\u2028') + text[i + 1:]
    return text[:i]


def test_fuzzed_documents_load_or_are_refused():
    rng = random.Random(11)
    bases = _fuzz_bases()
    outcomes = {"graph": 0, "refused": 0}
    for _ in range(600):
        doc = copy.deepcopy(rng.choice(bases))
        text = _mutate(rng, doc)
        if rng.random() < 0.3:                     # a second mutation on top
            text = _mutate(rng, json.loads(text)) if _load_outcome(text) == "graph" else text
        outcomes[_load_outcome(text)] += 1
    assert outcomes["refused"] > 300 and outcomes["graph"] > 0


def test_fuzzed_graphs_that_load_compile_and_agree_with_the_interpreter():
    """What the loader accepts is safe to compile: mutated documents that load run natively
    (in a subprocess: a bad graph could crash) and give the interpreter's results."""
    r = run_isolated("""
        import copy, random, sys, warnings
        import numpy as np
        import graphc
        from graphc.interpreter import interpret
        from graphc.runtime.native import NativeExecutable
        sys.path.insert(0, sys.argv[1])
        from test_hostile_inputs import _fuzz_bases, _mutate

        warnings.simplefilter("ignore")
        rng, bases, ran = random.Random(1), _fuzz_bases(), 0
        for it in range(1000):
            try:
                g = graphc.Graph.from_json(_mutate(rng, copy.deepcopy(rng.choice(bases))))
            except graphc.GraphFormatError:
                continue
            specs = [g.nx.nodes[i] for i in g.inputs]
            if any(np.prod(d["shape"]) > 10 ** 5 for d in specs):
                continue
            arrays = [np.random.default_rng(it).integers(-3, 3, d["shape"]).astype(d["dtype"])
                      for d in specs]
            try:
                want = interpret(g, *arrays)
            except Exception as e:
                want = e
            try:
                got = NativeExecutable(g, 1).run(arrays)
            except Exception as e:
                got = e
            ran += 1
            if isinstance(want, Exception) or isinstance(got, Exception):
                assert isinstance(want, Exception) and isinstance(got, Exception), (it, want, got)
                continue
            for a, b in zip(want, got):
                np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=str(it))
        print("ran", ran)
    """, str(Path(__file__).parent))
    assert r.returncode == 0 and int(r.stdout.split()[-1]) > 20, r.stdout + r.stderr


# ---------------------------------------------------------------------------------------
# 3. Disk cache entries

@pytest.fixture
def quiet_env(monkeypatch):
    monkeypatch.delenv(cache.ENV_VAR, raising=False)
    cache.disable_disk_cache()
    yield monkeypatch
    cache.disable_disk_cache()


def _fn(x):
    return x * 3 + 1


def _status(cf, x) -> str:
    return cf._entry_for((x,)).stages["_executable"].cache_status


def _stored_entry(d: Path) -> tuple:
    """Compile _fn into cache ``d``; returns (entry path, its bytes)."""
    x = np.ones(3)
    cf = graphc.compile(_fn, disk_cache=str(d))
    cf(x)
    assert _status(cf, x) == "disk-stored"
    (entry,) = cache.DiskCache(str(d)).entries()
    return entry, Path(entry).read_bytes()


def _header_blob(header: dict, payload: bytes) -> bytes:
    return cache.MAGIC + json.dumps(header).encode() + b"\n" + payload


def _tamper(blob: bytes, how: str) -> bytes:
    end = blob.index(b"\n", len(cache.MAGIC))
    header, payload = json.loads(blob[len(cache.MAGIC):end]), blob[end + 1:]
    if how == "header nested 4000 deep":
        return cache.MAGIC + b"[" * 4000 + b"\n" + payload
    if how == "header int of 4000 digits":
        return cache.MAGIC + b'{"size": ' + b"9" * 4000 + b"}\n" + payload
    if how == "huge declared size":
        return _header_blob(dict(header, size=2 ** 80), payload)
    if how == "header is a list":
        return _header_blob([header], payload)
    if how == "wrong key":
        return _header_blob(dict(header, key="0" * 64), payload)
    if how == "wrong format version":
        return _header_blob(dict(header, format=99), payload)
    if how == "truncated payload":
        return blob[:-100]
    if how == "payload hash mismatch":
        return blob[:-1] + bytes([blob[-1] ^ 0xFF])
    if how == "no newline after the header":
        return cache.MAGIC + b"x" * (cache.MAX_HEADER + 10)
    if how == "wrong magic":
        return b"\x7fELF" + blob[4:]
    raise AssertionError(how)


TAMPERINGS = ["header nested 4000 deep", "header int of 4000 digits", "huge declared size",
              "header is a list", "wrong key", "wrong format version", "truncated payload",
              "payload hash mismatch", "no newline after the header", "wrong magic"]


@pytest.mark.parametrize("how", TAMPERINGS)
def test_tampered_entry_is_a_clean_miss(tmp_path, quiet_env, how):
    d = tmp_path / "c"
    entry, blob = _stored_entry(d)
    Path(entry).write_bytes(_tamper(blob, how))
    x = np.arange(3.0)
    cf = graphc.compile(_fn, disk_cache=str(d))
    with pytest.warns(cache.DiskCacheWarning, match="ignoring disk cache entry"):
        np.testing.assert_array_equal(cf(x), x * 3 + 1)
    assert _status(cf, x) == "disk-stored"         # removed (ours), recompiled, stored again
    payload = blob[blob.index(b"\n", len(cache.MAGIC)) + 1:]
    assert cache.DiskCache(str(d)).load(Path(entry).name[:-len(cache.SUFFIX)]) == payload


def test_oversized_entry_is_a_miss_without_reading_it(tmp_path, quiet_env):
    d = tmp_path / "c"
    entry, _ = _stored_entry(d)
    os.truncate(entry, cache.MAX_PAYLOAD + cache.MAX_HEADER + 1)       # sparse: no disk used
    c = cache.DiskCache(str(d))
    key = Path(entry).name[:-len(cache.SUFFIX)]
    with pytest.warns(cache.DiskCacheWarning, match="larger than any object code"):
        assert c.load(key) is None
    assert not os.path.exists(entry)


def test_fifo_at_an_entry_path_never_blocks(tmp_path):
    """Opening a FIFO for reading blocks until a writer comes: the load must not open it,
    the compile goes on (a miss), and the FIFO, not ours to judge, stays."""
    d = tmp_path / "c"
    r = run_isolated("""
        import os, stat, sys, warnings
        import numpy as np
        import graphc
        from graphc.runtime import cache
        sys.path.insert(0, sys.argv[2])
        from test_hostile_inputs import _fn, _status
        d = sys.argv[1]
        x = np.ones(3)
        graphc.compile(_fn, disk_cache=d)(x)
        (entry,) = cache.DiskCache(d).entries()
        os.unlink(entry)
        os.mkfifo(entry)
        elsewhere = os.path.join(os.path.dirname(d), "fifo")
        os.mkfifo(elsewhere)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            cf = graphc.compile(_fn, disk_cache=d)
            print(cf(x), _status(cf, x))
            os.unlink(entry)
            os.symlink(elsewhere, entry)             # a link to a FIFO: not followed either
            cf = graphc.compile(_fn, disk_cache=d)
            print(cf(x), _status(cf, x))
            print(cache.DiskCache(d).clear())        # clear() leaves the link alone
        print(sorted({str(m.message).split(":")[-1].strip() for m in w}))
        print(os.path.islink(entry), stat.S_ISFIFO(os.stat(elsewhere).st_mode))
    """, str(d), str(Path(__file__).parent))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == lines[1] == "[4. 4. 4.] compiled", r.stdout
    assert lines[2] == "0"
    assert "not a regular file owned by this user; recompiling" in r.stdout
    assert lines[-1] == "True True"


def test_entry_of_another_user_is_neither_used_nor_removed(tmp_path, quiet_env):
    d = tmp_path / "c"
    entry, blob = _stored_entry(d)
    key = Path(entry).name[:-len(cache.SUFFIX)]
    real = os.getuid()
    c = cache.DiskCache(str(d))
    assert c.usable()
    quiet_env.setattr(os, "getuid", lambda: real + 1)    # the files now belong to "another"
    c._checked = True                                     # (the directory was checked)
    with pytest.warns(cache.DiskCacheWarning, match="not a regular file owned by this user"):
        assert c.load(key) is None
    with pytest.warns(cache.DiskCacheWarning, match="not replacing"):
        assert not c.store(key, b"other code")
    assert c.clear() == 0
    assert Path(entry).read_bytes() == blob


def test_entry_path_that_is_a_directory_is_a_miss(tmp_path, quiet_env):
    d = tmp_path / "c"
    entry, _ = _stored_entry(d)
    os.unlink(entry)
    os.mkdir(entry)
    x = np.ones(3)
    cf = graphc.compile(_fn, disk_cache=str(d))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cache.DiskCacheWarning)
        np.testing.assert_array_equal(cf(x), [4.0, 4.0, 4.0])
    assert _status(cf, x) == "compiled" and os.path.isdir(entry)


def test_symlinked_cache_directory_policy(tmp_path, quiet_env):
    """A symlink to a private directory is followed (its target is checked); a symlink to a
    directory others can write is refused like the directory itself."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(private)
    assert cache.DiskCache(str(link)).usable()
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    bad = tmp_path / "badlink"
    bad.symlink_to(shared)
    with pytest.warns(cache.DiskCacheWarning, match="writable by group or others"):
        assert not cache.DiskCache(str(bad)).usable()
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o777 and os.listdir(shared) == []


# ---------------------------------------------------------------------------------------
# 4. Native entry and planner: spoofed array types, size overflows
#
# Type spoofing at the native entry point is covered case by case in
# runtime/test_native_safety.py (objects faking ``__class__``, int subclasses, mocks) and
# sizes in ir/test_size_limits.py (huge expands at every opt level, arenas, constants, BLAS
# dims).  Here one clean process takes every hostile argument through the whole public
# path, for every backend and opt level, and a graph file declaring huge shapes goes through
# the public debugging entry.

SPOOF_BATTERY = """
    import json, sys
    from unittest import mock
    import numpy as np
    import eager, graphc

    class IntSub(int):
        pass

    class Faker:
        __class__ = property(lambda s: np.ndarray)
        shape, dtype, ndim = (3,), np.dtype("f8"), 1

    class Sub(np.ndarray):
        pass

    def hostile():
        yield "mock", mock.MagicMock(spec=np.ndarray)
        yield "int_subclass", IntSub(3)
        yield "faker", Faker()
        yield "ndarray_subclass", np.arange(3.0).view(Sub)
        yield "masked", np.ma.masked_array(np.arange(3.0), mask=[0, 1, 0])
        yield "object_dtype", np.array([1.0, None, 2.0], dtype=object)
        yield "big_endian", np.arange(3.0).astype(">f8")
        yield "strided", np.arange(6.0)[::2]
        yield "readonly", np.frombuffer(np.arange(3.0).tobytes())
        yield "complex", np.arange(3.0) + 1j
        yield "zero_stride", np.lib.stride_tricks.as_strided(np.arange(1.0), (3,), (0,))
        yield "huge_expand", None

    results = {}
    for opt in (0, 1, 2, 3):
        for backend in ("native", "interpreter"):
            for name, arg in hostile():
                def f(x):
                    if x is None:
                        return eager.ones(1, 1).expand(1 << 40, 1 << 40) * 2.0
                    if isinstance(x, int):         # a static value, as a Python int is
                        return x * 2.0
                    return (x * 2.0).sum()
                cf = graphc.compile(f, opt_level=opt, backend=backend)
                for call in range(2):          # the second call takes the cached path
                    try:
                        out = cf(arg)
                        want = float(np.sum(np.asarray(arg, dtype=np.float64) * 2.0))
                        results[f"{name}/{opt}/{backend}/{call}"] = (
                            "ok" if float(np.asarray(out)) == want else "WRONG",
                            float(np.asarray(out)))
                    except Exception as e:
                        results[f"{name}/{opt}/{backend}/{call}"] = ("error", type(e).__name__)
    print(json.dumps(results))
"""


def test_every_hostile_argument_through_every_backend_and_opt_level():
    r = run_isolated(SPOOF_BATTERY)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    for key, (kind, value) in res.items():
        name = key.split("/")[0]
        if name in ("ndarray_subclass", "big_endian", "strided", "readonly", "zero_stride",
                    "int_subclass"):
            assert kind == "ok", (key, kind, value)   # as its base array (int: a static value)
        elif name == "huge_expand":
            assert (kind, value) in (("error", "TooBigError"), ("error", "RuntimeError")), key
        else:
            assert kind == "error" and value in ("SignatureError", "TypeError"), (key, value)


def test_a_graph_file_declaring_huge_shapes_is_refused_through_the_public_entry(tmp_path):
    """A graph whose input is small but whose nodes declare (or broadcast to) sizes no
    array can have: refused by the loader or the size checks, never allocated."""
    r = run_isolated("""
        import json, sys
        import numpy as np
        import graphc
        from graphc.ir import Graph
        g = Graph("huge")
        x = g.add_input("x", (1, 1), "float32")
        g.outputs.append(g.add_node("exp", (x,), {}))
        doc = json.loads(g.to_json())
        out = []
        for shape in ([1 << 31, 1 << 31, 4], [2**62, 4], [1 << 20, 304384145, 14449]):
            bad = json.loads(json.dumps(doc))
            for node in bad["nodes"]:
                if node["op"] == "exp":
                    node["op"], node["attrs"] = "expand", {"shape": shape}
                    node["shape"] = shape
            try:
                h = Graph.from_json(json.dumps(bad))
                graphc.bisect_passes(h, np.ones((1, 1), np.float32))
                out.append("ran")
            except Exception as e:
                out.append(type(e).__name__)
        print(json.dumps(out))
    """)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert all(o in ("GraphFormatError", "TooBigError", "GraphVerificationError") for o in out), out


CHANGED_AFTER_A_CALL = """
    import json, warnings
    from unittest import mock
    import numpy as np
    import eager, graphc

    results = {}

    def attempt(name, fn, want):
        try:
            out = fn()
            results[name] = "ok" if np.array_equal(np.asarray(out), want) else "WRONG"
        except Exception as e:
            results[name] = type(e).__name__

    for backend in ("native", "interpreter"):
        f = graphc.compile(lambda x: (x * 2).sum(0), backend=backend)
        a = np.arange(6.0)
        f(a)
        a.shape = (2, 3)                       # reassigned in place: same buffer
        attempt(f"shape/{backend}", lambda: f(a), (a * 2).sum(0))
        b = np.arange(6.0)
        f(b)
        b.dtype = np.float32                   # the same bytes, 12 float32s
        attempt(f"dtype/{backend}", lambda: f(b), (b * 2).sum(0))
        c = np.arange(12.0)
        v = c[:6]
        f(v)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            v.strides = (16,)                  # every other element of c
        attempt(f"strides/{backend}", lambda: f(v), (v * 2).sum(0))
        d = np.arange(1000.0)
        f(d)
        d.resize((3,), refcheck=False)         # a smaller buffer: 3 elements to read
        attempt(f"resize/{backend}", lambda: f(d), (d * 2).sum(0))
        t = eager.arange(6.0)
        f(t)
        t.data = eager.ones(2)                 # another buffer of another shape
        attempt(f"tensor_data/{backend}", lambda: f(t).numpy(), np.full(1, 4.0).sum(0))
        w = eager.ones(3, requires_grad=True)
        w.grad = eager.ones(3)
        f(w.detach())
        w.grad._data = mock.MagicMock(spec=np.ndarray)      # a spoofed .grad buffer
        g = graphc.compile(lambda x: (x * 2).sum(), backend=backend)
        attempt(f"spoofed_grad/{backend}", lambda: g(w).detach().numpy(), 6.0)
        for where, box in (("list", lambda m: [m]), ("dict", lambda m: {"a": m}),
                           ("tuple", lambda m: (np.ones(3), m))):
            for name, make in (("mock", lambda: mock.MagicMock(spec=np.ndarray)),
                               ("mock_tensor", lambda: mock.MagicMock(spec=eager.Tensor))):
                attempt(f"{where}_{name}/{backend}", lambda: f(box(make())), None)
    print(json.dumps(results))
"""


def test_arrays_changed_after_a_call_and_spoofs_inside_containers():
    """A cached signature never trusts an array's old shape, dtype, strides or buffer
    (each call reads them again: a new signature, or the layout check of the entry),
    and a spoof nested in a container or behind a Tensor never reaches native code."""
    r = run_isolated(CHANGED_AFTER_A_CALL)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    for backend in ("native", "interpreter"):
        for name in ("shape", "dtype", "strides", "resize", "tensor_data"):
            assert res[f"{name}/{backend}"] == "ok", (name, backend, res)
        assert res[f"spoofed_grad/{backend}"] in ("GraphcError", "SignatureError",
                                                  "ValueError", "TypeError"), res
        for where in ("list", "dict", "tuple"):
            for name in ("mock", "mock_tensor"):
                assert res[f"{where}_{name}/{backend}"] == "SignatureError", res
