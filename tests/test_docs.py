"""The docs are executable: what they print is what the code prints.

Every fenced block of every page (docs/*.md and README.md) is one of these, by its
fence language (``test_every_block_is_run_or_excused`` checks it):

* ```python: runs.  A page's python blocks run in order, in one namespace (as if
  the page were one script); when an output block (```text, or a bare ``` block)
  follows one (only blank lines between), the block's stdout must equal it, else
  it must print nothing.  Each block is compiled with the page's line numbers, so
  source lines printed in IR comments (``# concepts.md:123``) are the page's own.
  - docs/concepts.md, docs/eager-engine.md, docs/models.md and the "Adding a pass"
    section of docs/passes.md run in this process (their own tests below);
  - every other page runs in one subprocess per page (``test_page_prints_what_it_says``),
    in a temporary directory that is also its XDG_CACHE_HOME, so a page that turns on
    the disk cache or changes process-wide settings cannot leak into other tests;
  - README.md's taste runs in its own test; docs/adding-an-op.md's blocks are edits
    that the worked-example test applies to a copy of the project (slow);
  - a block listed in ``EXCUSED`` (with the reason) does not run.
* ```sh: runs when listed in ``SH_RUN`` (cheap, deterministic ``graphc ir``
  commands), else it must be listed in ``EXCUSED`` with the reason.
* a bare ``` block that is not an output: only when listed in ``EXCUSED``.
* any other language (```text, ```ebnf, ```json, ```c, ...) is not code: shown, never run.

Normalized before comparing (``normalize``): object addresses (``0x7f...``) and
wall-clock times printed by the code (``0.123 ms``, ``compile_seconds``: see
``TIMES``), which differ on every run; nothing else.

* README.md opens with exactly the two commands.
* docs/adding-an-op.md: the worked example is applied to a copy of the
  project and the completeness tests pass for the new op (slow).
* the fresh-clone check of the README's two commands (slow).

``python tests/test_docs.py --update docs/concepts.md`` rewrites the output blocks
from a run (review the diff before committing it).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import traceback
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
ADDR = re.compile(r"0x[0-9a-fA-F]+")
FENCE = re.compile(r"^```(\w*)\s*$")
OUTPUT_LANGS = ("text", "")          # an output block right after a python block


# ---------------------------------------------------------------------------
# markdown blocks


class Block:
    def __init__(self, lang: str, fence_line: int, end_line: int, text: str) -> None:
        self.lang = lang            # "python", "text", "sh", ...
        self.fence_line = fence_line  # 1-based line of the opening fence
        self.end_line = end_line      # 1-based line of the closing fence
        self.text = text


def blocks(path: Path) -> list:
    """Fenced code blocks of a markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        out.append(Block(m.group(1), start + 1, i + 1, "\n".join(body)))
        i += 1
    return out


def snippets(path: Path) -> list:
    """(python block, expected output or None) pairs; the output is the ```text (or bare
    ```) block that comes right after the python block (only blank lines in between)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    bs = blocks(path)
    pairs = []
    for k, b in enumerate(bs):
        if b.lang != "python":
            continue
        nxt = bs[k + 1] if k + 1 < len(bs) else None
        between = lines[b.end_line:nxt.fence_line - 1] if nxt is not None else ["x"]
        if (nxt is not None and nxt.lang in OUTPUT_LANGS
                and not any(s.strip() for s in between)):
            pairs.append((b, nxt))
        else:
            pairs.append((b, None))
    return pairs


def normalize(text: str) -> str:
    text = ADDR.sub("0x...", text)
    text = TIMES.sub(_time_placeholder, text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


# Wall-clock times the code prints (they differ on every run): a number with a time
# unit ("0.31 ms", "12 us"), and the values of the keys named *_seconds / *_ms in a
# printed dict.  Both become "<time>" in what is printed and in what the page says.
TIMES = re.compile(r"(?P<num>\b\d+(?:\.\d+)?(?:e[-+]?\d+)?) ?(?P<unit>ns|us|µs|ms|s)\b"
                   r"|(?P<key>'\w+_(?:seconds|ms)': )(?P<val>[-+0-9.e]+)")


def _time_placeholder(m: re.Match) -> str:
    return m.group("key") + "<time>" if m.group("key") else "<time>"


def section_lines(path: Path, heading: str) -> tuple:
    """(first, end) 1-based lines of the section that starts at the line ``heading``
    (a ``## `` heading) and ends before the next ``## `` heading."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(heading) + 1
    end = next((i + 1 for i in range(start, len(lines)) if lines[i].startswith("## ")),
               len(lines) + 1)
    return start, end


# ---------------------------------------------------------------------------
# which blocks run, and the ones that do not (with the reason)

# Pages whose python blocks run in this process, each in its own test below.
IN_PROCESS = ("concepts.md", "eager-engine.md", "models.md", "README.md")
# Pages whose python blocks are run by another test.
RUN_ELSEWHERE = {
    "adding-an-op.md": "its blocks are edits to the project, applied to a copy by "
                       "test_adding_an_op_worked_example_passes_the_completeness_tests (slow), "
                       "which also runs its check.py",
}

# (page, first non-blank line of the block): why the block does not run.
EXCUSED = {
    ("README.md", "python3 dev.py demo"):
        "the two bootstrap commands: they create .venv and install packages; "
        "test_readme_commands_work_in_a_fresh_clone runs them (slow)",
    ("README.md", "eager/      the Tensor API: tensor.py, surface.py (the op surface shared with graphc's tracer),"):
        "a directory listing, not code",
    ("graphc-layers.md", "graphc/__init__.py   the public surface: imports every room, nothing imports it"):
        "a diagram of the layers, not code",
    ("concepts.md", ".venv/bin/graphc compare examples/seed_graph_3x3.py:L3     # its L3_example_args(): 3x3 float64"):
        "prints timings, and `graphc demo`/`graphc bench` take minutes",
    ("adding-an-op.md", ".venv/bin/python -m pytest -q -k softplus tests/eager/ops/test_ops.py \\"):
        "the worked-example test runs these pytest commands on a copy of the project (slow)",
    ("benchmarks.md", ".venv/bin/graphc bench            # about a minute; --quick for fewer repeats, --json for data"):
        "takes about a minute and prints timings",
    ("backend.md", "PYTHONPATH=. python3 -m tests.parity.tierdiff 2000 1000   # 2000 programs from seed 1000"):
        "a tier fuzz campaign: minutes; CI runs a sample (test_tiers_adversarial.py)",
    ("testing.md", "PYTHONPATH=. python3 -m tests.parity.tierdiff 2000 1000   # 2000 programs from seed 1000"):
        "a tier fuzz campaign: minutes; CI runs a sample (test_tiers_adversarial.py)",
    ("testing.md", "python3 -m pytest tests/parity/test_fuzz.py --fuzz 2000             # 2000 programs"):
        "runs thousands of fuzz programs (minutes)",
    ("testing.md", "GRAPHC_FUZZ_N=400 python3 -m pytest tests/graphc/backend/test_fuzz_reuse.py -k poisoned"):
        "a memory-plan fuzz campaign (minutes); CI runs the default 12 programs",
    ("testing.md", 'GRAPHC_FUZZ_N=400 GRAPHC_FUZZ_LONG=1 python3 -m pytest -q tests/graphc/backend/test_fuzz_reuse.py tests/graphc/runtime/test_tiers_fuzz_kernels.py tests/graphc/onnx/test_roundtrip.py tests/graphc/test_autodiff.py -k "fuzz or random_program" tests/graphc/test_tensor_call_fuzz.py'):
        "a long fuzz campaign (an hour or more); CI runs the default samples",
    ("testing.md", "python3 -m pytest -q -p no:cacheprovider --durations=30 --junitxml=/tmp/t.xml tests/graphc/onnx"):
        "prints timings (different on every run)",
    ("testing.md", "python3 dev.py test -q -n 0                 # one process (-p no:xdist too)"):
        "runs the whole suite (minutes); the fresh-clone test runs `dev.py test`",
    ("backend-accuracy.md", '.venv/bin/python -c "'):
        "a 3 s measurement whose worst inputs depend on the CPU LLVM targets; the table "
        "below is its output on the machine it names",
    ("backend-accuracy.md", "import mpmath as mp"):
        "needs mpmath, which is not a dependency of the project (only for regenerating "
        "the polynomial tables)",
}

# sh blocks made only of these commands run (cheap and deterministic), compared with
# the output block after them.
SH_RUNNABLE = re.compile(r"^(?:\.venv/bin/)?graphc ir ")


def _first_line(block: Block) -> str:
    return next((ln.strip() for ln in block.text.splitlines() if ln.strip()), "")


def excuse(path: Path, block: Block) -> Optional[str]:
    return EXCUSED.get((path.name, _first_line(block)))


def sh_commands(block: Block) -> Optional[list]:
    """The commands of a runnable sh block (each as argv after `graphc`), or None."""
    cmds = [ln.strip() for ln in block.text.splitlines()
            if ln.strip() and not ln.strip().startswith("#")]
    if not cmds or not all(SH_RUNNABLE.match(c) for c in cmds):
        return None
    import shlex
    return [shlex.split(c.split("  #")[0])[1:] for c in cmds]


def pages() -> list:
    return [ROOT / "README.md", *sorted(p for p in DOCS.glob("*.md"))]


def isolated_pages() -> list:
    """The pages run by test_page_prints_what_it_says: every page with a python block
    or a runnable sh block that no other test runs."""
    out = []
    for page in pages():
        if page.name in IN_PROCESS or page.name in RUN_ELSEWHERE:
            continue
        if any((b.lang == "python" and excuse(page, b) is None)
               or (b.lang == "sh" and sh_commands(b) is not None) for b in blocks(page)):
            out.append(page)
    return out


# ---------------------------------------------------------------------------
# running a page


def run_page(path: Path, section: Optional[tuple] = None, catch: bool = False) -> list:
    """Run every python block of ``path`` (or of the ``section`` lines) in one namespace;
    [(block, expected, got, error)].  With ``catch``, a block that raises ends the run
    with its traceback as ``error`` (else the exception propagates)."""
    ns: dict = {"__name__": "__docs__"}
    results = []
    for block, expected in snippets(path):
        if section is not None and not section[0] <= block.fence_line < section[1]:
            continue
        if excuse(path, block) is not None:
            continue
        code = "\n" * block.fence_line + block.text + "\n"
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile(code, path.name, "exec"), ns)
        except BaseException:
            if not catch:
                raise
            results.append((block, expected, buf.getvalue(), traceback.format_exc()))
            break
        results.append((block, expected, buf.getvalue(), None))
    return results


def _sh_results(path: Path, cwd: Path, env: dict) -> list:
    """Run the runnable sh blocks of ``path``: [(block, expected, got, error)]."""
    bs = blocks(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    results = []
    for k, b in enumerate(bs):
        cmds = sh_commands(b) if b.lang == "sh" else None
        if cmds is None:
            continue
        nxt = bs[k + 1] if k + 1 < len(bs) else None
        expected = None
        if (nxt is not None and nxt.lang in OUTPUT_LANGS
                and not any(s.strip() for s in lines[b.end_line:nxt.fence_line - 1])):
            expected = nxt
        got, error = "", None
        for argv in cmds:
            r = subprocess.run([sys.executable, "-c", "import sys; from graphc.tools.cli "
                                "import main; sys.exit(main(sys.argv[1:]))", *argv],
                               cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
            got += r.stdout
            if r.returncode:
                error = f"graphc {' '.join(argv)} exited {r.returncode}: {r.stderr[-3000:]}"
                break
        results.append((b, expected, got, error))
    return results


def _child_env(tmp: Path) -> dict:
    # TMPDIR too: a page's temporary files are the run's own, not shared with another
    # test process of a parallel run (`dev.py test`)
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(tmp), TMPDIR=str(tmp))
    env.pop("GRAPHC_CACHE_DIR", None)
    return env


def run_page_isolated(path: Path) -> list:
    """Run the page's python blocks (in one namespace, in a subprocess whose current
    directory and XDG_CACHE_HOME are a fresh temporary directory), then its runnable sh
    blocks (from the project root); [(block, expected, got, error)] in page order."""
    with tempfile.TemporaryDirectory(prefix="graphc-docs-") as tmp:
        tmp_path = Path(tmp).resolve()
        env = _child_env(tmp_path)
        results = []
        if any(b.lang == "python" for b in blocks(path)):
            out = tmp_path / "results.json"
            r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--run",
                                str(path), str(out)], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=600)
            if r.returncode or not out.exists():
                raise AssertionError(f"{path.name}: the page's run failed:\n"
                                     f"{r.stdout[-3000:]}{r.stderr[-3000:]}")
            by_line = {d["line"]: d for d in json.loads(out.read_text(encoding="utf-8"))}
            for block, expected in snippets(path):
                if block.fence_line in by_line:
                    d = by_line[block.fence_line]
                    results.append((block, expected, d["got"], d["error"]))
        results += _sh_results(path, ROOT, env)
    return sorted(results, key=lambda r: r[0].fence_line)


def _run_for_test(path: Path) -> list:
    if path.name in IN_PROCESS:
        return run_page(path)
    return run_page_isolated(path)


def _report(path: Path, results: list) -> list:
    bad = []
    for block, expected, got, error in results:
        if error is not None:
            bad.append(f"{path.name}:{block.fence_line}: raised\n{textwrap.indent(error, '    ')}"
                       f"\n  after printing\n{textwrap.indent(got, '    ')}")
            continue
        want = normalize(expected.text) if expected is not None else ""
        if normalize(got) != want:
            bad.append(f"{path.name}:{block.fence_line}: printed\n{textwrap.indent(got, '    ')}"
                       f"\n  but the page says\n{textwrap.indent(want, '    ')}")
    return bad


def _mismatches(path: Path, section: Optional[tuple] = None) -> list:
    return _report(path, run_page(path, section))


def update(path: Path) -> None:
    """Rewrite the output blocks of ``path`` with what its python (and runnable sh)
    blocks print (a new ```text block after a block that prints and has none).  Output
    that names the page's own lines moves when a block above grows, so it reruns until
    the page stops changing."""
    for _ in range(4):
        before = path.read_text(encoding="utf-8")
        _update_once(path)
        if path.read_text(encoding="utf-8") == before:
            return
    raise SystemExit(f"{path.name}: the output blocks do not settle; check the diff")


def _update_once(path: Path) -> None:
    results = _run_for_test(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    edits = []
    for block, expected, got, error in results:
        if error is not None:
            raise SystemExit(f"{path.name}:{block.fence_line} raised:\n{error}")
        got = ADDR.sub("0x...", got).rstrip("\n")
        if expected is not None:
            if normalize(got) == normalize(expected.text):
                continue                     # same up to times: keep the page's text
            edits.append((expected.fence_line, expected.end_line, got, expected.lang))
        elif got.strip():
            edits.append((block.end_line + 1, block.end_line, got, "text"))   # a new block
    for start, end, got, lang in reversed(edits):
        new = ["```" + lang, *[ln.rstrip() for ln in got.splitlines()], "```"]
        if end < start:                      # insertion after a python block
            lines[start - 1:start - 1] = ["", *new] if lines[start - 1:start] != [""] else new
        else:
            lines[start - 1:end] = new
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _child_run(path: Path, out: Path) -> None:
    """``--run PAGE OUT``: run the page here and write [{line, got, error}] to OUT."""
    results = run_page(path, catch=True)
    out.write_text(json.dumps([{"line": b.fence_line, "got": got, "error": err}
                               for b, _, got, err in results]), encoding="utf-8")


# ---------------------------------------------------------------------------
# docs/concepts.md


def test_concepts_snippets_print_what_the_page_says():
    path = DOCS / "concepts.md"
    pairs = snippets(path)
    assert len(pairs) >= 20, "concepts.md should teach with many small runnable snippets"
    bad = _mismatches(path)
    assert not bad, "\n\n".join(bad)


def test_eager_engine_snippets_print_what_the_page_says():
    path = DOCS / "eager-engine.md"
    assert len(snippets(path)) >= 5
    bad = _mismatches(path)
    assert not bad, "\n\n".join(bad)


def test_models_snippets_print_what_the_page_says():
    path = DOCS / "models.md"
    assert len(snippets(path)) >= 4
    bad = _mismatches(path)
    assert not bad, "\n\n".join(bad)


def test_passes_adding_a_pass_section_prints_what_the_page_says():
    """The worked example of docs/passes.md (only that section runs: the page's other
    blocks show excerpts); it registers passes and must unregister them."""
    from graphc import passes
    path = DOCS / "passes.md"
    section = section_lines(path, "## Adding a pass")
    assert len([b for b, out in snippets(path)
                if section[0] <= b.fence_line < section[1] and out is not None]) >= 2
    before = set(passes.REGISTRY)
    try:
        bad = _mismatches(path, section)
    finally:
        left = set(passes.REGISTRY) - before
        for name in left:                   # a failing run must not break later tests
            passes.unregister_pass(name)
    assert not bad, "\n\n".join(bad)
    assert not left, f"the example leaves passes registered: {sorted(left)}"


@pytest.mark.parametrize("page", [p.name for p in isolated_pages()])
def test_page_prints_what_it_says(page):
    """Every python block of the page runs (one subprocess per page) and prints its
    output block, or nothing; its runnable sh blocks too."""
    path = ROOT / page if page == "README.md" else DOCS / page
    results = run_page_isolated(path)
    assert results, f"{page}: nothing ran"
    bad = _report(path, results)
    assert not bad, "\n\n".join(bad)


def test_every_block_is_run_or_excused():
    """No page has a python, sh or bare block that no test runs, unless EXCUSED says
    why; every other block is labelled as not code by its fence language; and every
    excuse still names a block."""
    problems, used = [], set()
    isolated = {p.name for p in isolated_pages()}
    for page in pages():
        outputs = {o.fence_line for _, o in snippets(page) if o is not None}
        for b in blocks(page):
            where = f"{page.name}:{b.fence_line} ```{b.lang}"
            reason = excuse(page, b)
            if reason is not None:
                used.add((page.name, _first_line(b)))
                assert reason.strip(), where
                continue
            if b.lang == "python":
                if not (page.name in IN_PROCESS or page.name in RUN_ELSEWHERE
                        or page.name in isolated):
                    problems.append(f"{where}: no test runs it")
            elif b.fence_line in outputs:
                continue
            elif b.lang == "sh":
                if sh_commands(b) is None:
                    problems.append(f"{where}: neither a runnable `graphc ir` block nor EXCUSED")
            elif b.lang == "":
                problems.append(f"{where}: unlabelled block; fence it as ```text (or the "
                                f"language it is in) if it is not code, or list it in EXCUSED")
    for page in IN_PROCESS:
        assert page == "README.md" or (DOCS / page).exists(), page
    stale = sorted(set(EXCUSED) - used)
    assert not stale, f"EXCUSED names blocks no page has: {stale}"
    assert not problems, "\n".join(problems)


def test_concepts_blocks_parse_and_pair():
    """Every python block of concepts.md shows its output (no silent blocks there)."""
    path = DOCS / "concepts.md"
    silent = [b.fence_line for b, out in snippets(path) if out is None]
    assert not silent, f"python blocks without a ```text output block at lines {silent}"


def test_harness_pairs_and_normalizes(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# t\n\n```python\nx = object()\nprint(repr(x)[-1], 'a ')\n```\n\n"
                    "```text\n> a\n```\n\nprose\n\n```python\ny = 2\n```\n\nmore\n\n"
                    "```text\nnot an output\n```\n", encoding="utf-8")
    pairs = snippets(page)
    assert [(b.fence_line, o.fence_line if o else None) for b, o in pairs] == [(3, 8), (14, None)]
    assert normalize("<X object at 0x7f3a2b>  \n\n") == "<X object at 0x...>"
    assert normalize("took 0.31 ms, 12 us, 1.5e-05 s; {'compile_seconds': 0.0123}") == \
        "took <time>, <time>, <time>; {'compile_seconds': <time>}"
    assert normalize("3 kernels, 2 cores, 10 steps") == "3 kernels, 2 cores, 10 steps"
    assert _mismatches(page) == []
    page.write_text(page.read_text().replace("> a", "> b"))
    assert len(_mismatches(page)) == 1
    # a bare block right after a python block is its output too
    page.write_text("```python\nprint('hi')\n```\n\n```\nhi\n```\n", encoding="utf-8")
    (b, o), = snippets(page)
    assert o is not None and o.lang == "" and _mismatches(page) == []
    # a block that raises is reported in a subprocess run, not a crash of the runner
    page.write_text("```python\nprint('a')\n```\n\n```python\n1/0\n```\n", encoding="utf-8")
    bad = _report(page, run_page_isolated(page))
    assert len(bad) == 2 and "ZeroDivisionError" in bad[1], bad


# ---------------------------------------------------------------------------
# README.md


def _readme_first_block() -> Block:
    return blocks(ROOT / "README.md")[0]


def test_readme_opens_with_exactly_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first = _readme_first_block()
    before = text.splitlines()[:first.fence_line - 1]
    # at most a title line (and blank lines) before the commands
    assert len([ln for ln in before if ln.strip()]) <= 1, before
    cmds = [ln.strip() for ln in first.text.splitlines() if ln.strip()
            and not ln.strip().startswith("#")]
    assert cmds == ["python3 dev.py demo", "python3 dev.py test"]


def test_readme_taste_prints_what_the_readme_says():
    path = ROOT / "README.md"
    assert any(b.lang == "python" for b in blocks(path))
    bad = _mismatches(path)
    assert not bad, "\n\n".join(bad)


def test_readme_and_index_link_existing_files():
    for page in (ROOT / "README.md", DOCS / "README.md"):
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_docs_index_lists_every_doc():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for md in sorted(DOCS.glob("*.md")):
        if md.name != "README.md":
            assert f"({md.name})" in index, f"docs/README.md does not list {md.name}"


# ---------------------------------------------------------------------------
# docs/adding-an-op.md: the worked example, applied to a copy of the project


def _worked_example() -> dict:
    """The blocks of adding-an-op.md tagged with the file they go into.

    A block belongs to a file when the line right before its fence is
    ``<!-- edit: PATH append -->`` or ``<!-- edit: PATH after|before ANCHOR -->`` (the block
    goes after/before the one line of PATH that contains ANCHOR).
    """
    path = DOCS / "adding-an-op.md"
    lines = path.read_text(encoding="utf-8").splitlines()
    edits = []
    for b in blocks(path):
        prev = lines[b.fence_line - 2] if b.fence_line >= 2 else ""
        m = re.match(r"<!-- edit: (\S+) (append|after|before) ?(.*?) -->", prev.strip())
        if m:
            edits.append((m.group(1), m.group(2), m.group(3), b.text))
    return edits


def apply_worked_example(dest: Path) -> list:
    """Copy eager/, graphc/ and tests/ to ``dest`` and apply the doc's edits there."""
    for d in ("eager", "graphc", "tests"):
        shutil.copytree(ROOT / d, dest / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    applied = []
    for rel, how, anchor, text in _worked_example():
        f = dest / rel
        src = f.read_text(encoding="utf-8")
        if how == "append":
            src = src.rstrip("\n") + "\n\n" + text + "\n"
        else:
            assert src.count(anchor) == 1, f"{rel}: anchor {anchor!r} found {src.count(anchor)}x"
            i = src.index(anchor)
            if how == "after":
                j = src.index("\n", i) + 1
                src = src[:j] + text + "\n" + src[j:]
            else:
                j = src.rindex("\n", 0, i) + 1
                src = src[:j] + text + "\n" + src[j:]
        f.write_text(src, encoding="utf-8")
        applied.append((rel, how))
    return applied


@pytest.mark.slow
def test_adding_an_op_worked_example_passes_the_completeness_tests(tmp_path):
    applied = apply_worked_example(tmp_path)
    files = {rel for rel, _ in applied}
    # an op is three edits: its record, its method, its lowering entry
    assert files == {"eager/ops/elementwise.py", "eager/surface.py",
                     "graphc/backend/lowering/elementwise.py"}, files
    env = dict(os.environ, PYTHONPATH=str(tmp_path), OPENBLAS_NUM_THREADS="1")
    env.pop("GRAPHC_CACHE_DIR", None)
    probe = subprocess.run([sys.executable, "-c", "import eager, graphc; "
                            "print(eager.__file__); print(graphc.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert all(line.startswith(str(tmp_path)) for line in probe.stdout.split()), probe.stdout
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-k", "softplus or every_op_has_a_native_lowering",
         "tests/eager/ops/test_ops.py", "tests/parity/test_interpreter_parity.py",
         "tests/graphc/backend/test_native.py", "tests/graphc/test_autodiff.py",
         "tests/graphc/ir/test_ir_json.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    m = re.search(r"(\d+) passed", r.stdout)
    assert m and int(m.group(1)) >= 20, r.stdout[-2000:]
    # the page's check.py (its one untagged python block) prints what the page says
    (check, expected), = [(b, out) for b, out in snippets(DOCS / "adding-an-op.md")
                          if "<!-- edit:" not in _line_before(DOCS / "adding-an-op.md", b)]
    (tmp_path / "check.py").write_text(check.text + "\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "check.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert expected is not None and normalize(r.stdout) == normalize(expected.text), r.stdout


def _line_before(path: Path, block: Block) -> str:
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[block.fence_line - 2] if block.fence_line >= 2 else ""


# ---------------------------------------------------------------------------
# the README's commands from a fresh clone


@pytest.mark.slow
def test_readme_commands_work_in_a_fresh_clone(tmp_path):
    """``git clone`` the committed project; run ``python3 dev.py test`` on one file (the seed
    tutorials' tests), then ``python3 dev.py demo`` (short).

    Measured here: about 35 s (creating .venv and installing the dependencies
    from the package index included).  Uses the last commit, not the working tree.
    """
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    python3 = shutil.which("python3") or sys.executable
    clone = tmp_path / "clone"
    subprocess.run([git, "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    if not (clone / "dev.py").exists():
        pytest.skip("the last commit has no dev.py")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    # one small file: what is checked is that the command makes a working .venv and runs
    # pytest in it (``-k seed`` also selected the 120 random programs of test_fuzz.py, which
    # the suite itself runs, and collected all 15,000 tests first)
    r = subprocess.run([python3, "dev.py", "test", "-q", "-x", "-p", "no:cacheprovider",
                        "tests/eager/test_seeds.py"], cwd=clone, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"\d+ passed", r.stdout), r.stdout[-2000:]
    # the first command, on the .venv the second one made (a short run of the demo)
    r = subprocess.run([python3, "dev.py", "demo", "--steps", "20"], cwd=clone, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "final weights, compiled vs eager" in r.stdout and "agree" in r.stdout


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))      # not tests/eager (a directory of tests) as `eager`
    if sys.path[1:2] == [str(Path(__file__).resolve().parent)]:
        del sys.path[1]                # the script's own directory (tests/) holds `eager/`
    if len(sys.argv) == 3 and sys.argv[1] == "--update":
        update(Path(sys.argv[2]).resolve())
    elif len(sys.argv) == 4 and sys.argv[1] == "--run":
        _child_run(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        print(__doc__)


def test_ir_op_table_is_generated_from_the_records():
    """docs/ir.md's op table is the registry's own (``python3 dev.py docs`` rewrites it)."""
    from eager.ops.registry import op_table
    text = (DOCS / "ir.md").read_text(encoding="utf-8")
    begin, end = "<!-- op-table: begin -->\n", "<!-- op-table: end -->"
    current = text[text.index(begin) + len(begin):text.index(end)]
    assert current == op_table(), "docs/ir.md's op table is stale: run `python3 dev.py docs`"


def test_ops_page_is_generated_from_the_code():
    """docs/ops.md's catalogue is the code's own (``python3 dev.py docs`` rewrites it)."""
    from graphc.tools.opdocs import BEGIN, END, ops_page
    text = (DOCS / "ops.md").read_text(encoding="utf-8")
    current = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    assert current == ops_page(), "docs/ops.md is stale: run `python3 dev.py docs`"
    undocumented = [line for line in current.splitlines() if line.rstrip().endswith("|  |")]
    assert not undocumented, f"give these a docstring (or a record doc=): {undocumented}"
