"""The docs are executable: what they print is what the code prints.

* docs/concepts.md (and docs/eager-engine.md, docs/models.md, and the "Adding a pass"
  section of docs/passes.md): every ```python block runs, in order, in one namespace
  (as if the page were one script); when a ```text block follows it (only blank
  lines between), the block's stdout must equal that text, else it must print
  nothing.  Object addresses (``0x7f...``) are normalized.  Each block is
  compiled with the page's line numbers, so source lines printed in IR
  comments (``# concepts.md:123``) are the page's own lines.
* README.md opens with exactly the two commands, and its taste prints what it shows.
* docs/adding-an-op.md: the worked example is applied to a copy of the
  project and the completeness tests pass for the new op (slow).
* the fresh-clone check of the README's two commands (slow).

``python tests/test_docs.py --update docs/concepts.md`` rewrites the ```text
blocks from a run (review the diff before committing it).
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
ADDR = re.compile(r"0x[0-9a-fA-F]+")
FENCE = re.compile(r"^```(\w*)\s*$")


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
    """(python block, expected output or None) pairs; the output is the ```text block
    that comes right after the python block (only blank lines in between)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    bs = blocks(path)
    pairs = []
    for k, b in enumerate(bs):
        if b.lang != "python":
            continue
        nxt = bs[k + 1] if k + 1 < len(bs) else None
        between = lines[b.end_line:nxt.fence_line - 1] if nxt is not None else ["x"]
        if nxt is not None and nxt.lang == "text" and not any(s.strip() for s in between):
            pairs.append((b, nxt))
        else:
            pairs.append((b, None))
    return pairs


def normalize(text: str) -> str:
    text = ADDR.sub("0x...", text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def section_lines(path: Path, heading: str) -> tuple:
    """(first, end) 1-based lines of the section that starts at the line ``heading``
    (a ``## `` heading) and ends before the next ``## `` heading."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index(heading) + 1
    end = next((i + 1 for i in range(start, len(lines)) if lines[i].startswith("## ")),
               len(lines) + 1)
    return start, end


def run_page(path: Path, section: Optional[tuple] = None) -> list:
    """Run every python block of ``path`` (or of the ``section`` lines) in one namespace;
    [(block, expected, got)]."""
    ns: dict = {"__name__": "__docs__"}
    results = []
    for block, expected in snippets(path):
        if section is not None and not section[0] <= block.fence_line < section[1]:
            continue
        code = "\n" * block.fence_line + block.text + "\n"
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, path.name, "exec"), ns)
        results.append((block, expected, buf.getvalue()))
    return results


def _mismatches(path: Path, section: Optional[tuple] = None) -> list:
    bad = []
    for block, expected, got in run_page(path, section):
        want = normalize(expected.text) if expected is not None else ""
        if normalize(got) != want:
            bad.append(f"{path.name}:{block.fence_line}: printed\n{textwrap.indent(got, '    ')}"
                       f"\n  but the page says\n{textwrap.indent(want, '    ')}")
    return bad


def update(path: Path) -> None:
    """Rewrite the ```text blocks of ``path`` with what the python blocks print."""
    lines = path.read_text(encoding="utf-8").splitlines()
    edits = []
    for block, expected, got in run_page(path):
        got = ADDR.sub("0x...", got).rstrip("\n")
        if expected is not None:
            edits.append((expected.fence_line, expected.end_line, got))
        elif got.strip():
            edits.append((block.end_line + 1, block.end_line, got))   # insert a new block
    for start, end, got in reversed(edits):
        new = ["```text", *[ln.rstrip() for ln in got.splitlines()], "```"]
        if end < start:                      # insertion after a python block
            lines[start - 1:start - 1] = ["", *new] if lines[start - 1:start] != [""] else new
        else:
            lines[start - 1:end] = new
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


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
    assert _mismatches(page) == []
    page.write_text(page.read_text().replace("> a", "> b"))
    assert len(_mismatches(page)) == 1


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
         "tests/eager/test_ops.py", "tests/graphc/test_interpreter_parity.py",
         "tests/graphc/test_native.py", "tests/graphc/test_autodiff.py",
         "tests/graphc/test_ir_json.py"],
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
    """``git clone`` the committed project; run ``python3 dev.py test`` on a subset, then
    ``python3 dev.py demo`` (short).

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
    r = subprocess.run([python3, "dev.py", "test", "-q", "-x", "-p", "no:cacheprovider",
                        "-k", "seed"], cwd=clone, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"\d+ passed", r.stdout), r.stdout[-2000:]
    # the first command, on the .venv the second one made (a short run of the demo)
    r = subprocess.run([python3, "dev.py", "demo", "--steps", "20"], cwd=clone, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "final weights, compiled vs eager" in r.stdout and "agree" in r.stdout


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))      # not tests/eager (a directory of tests) as `eager`
    if len(sys.argv) == 3 and sys.argv[1] == "--update":
        update(Path(sys.argv[2]))
    else:
        print(__doc__)


def test_ir_op_table_is_generated_from_the_records():
    """docs/ir.md's op table is the registry's own (``python3 dev.py docs`` rewrites it)."""
    from eager.ops.registry import op_table
    text = (DOCS / "ir.md").read_text(encoding="utf-8")
    begin, end = "<!-- op-table: begin -->\n", "<!-- op-table: end -->"
    current = text[text.index(begin) + len(begin):text.index(end)]
    assert current == op_table(), "docs/ir.md's op table is stale: run `python3 dev.py docs`"
