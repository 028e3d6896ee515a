"""Every ```python block of the docs and the README runs, and prints what the page shows.

A block is a whole program (self-contained: its imports, its data). Its first lines may say
how to run it, as comments:

* ``# terascale run -n N``: under the launcher with N workers (default: plain ``python``);
* ``# needs: torch`` (or ``pyspark``, ``ray``, ``distributed``, ...): skipped, saying so, when
  that package is missing. Spark, Ray and Dask blocks start an engine (10-30 s) and blocks marked ``# slow`` take
  as long, so they run only under ``TERASCALE_DOCS_FULL=1`` (``make docs-snippets``); the
  suite says they were skipped.

A ```text block that follows a python block with nothing but blank lines between is the
output the page claims: the program's standard output must equal it line by line (trailing
spaces ignored; ``...`` in a line matches any text). Under the launcher only rank 0 should
print, so the output is the same on every run.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_FENCE = re.compile(r"^(`{3,})([\w{}-]*)[^\n]*\n(.*?)^\1[ \t]*$", re.M | re.S)
_SLOW_ENGINES = {"pyspark", "ray", "distributed"}


@dataclass
class Snippet:
    path: Path
    line: int
    code: str
    output: str | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documents() -> list[Path]:
    pages = sorted((ROOT / "docs").rglob("*.md"))
    pages = [p for p in pages if "_build" not in p.parts and "api" not in p.parent.parts]
    return [ROOT / "README.md", *pages]


def snippets(path: Path) -> list[Snippet]:
    text = path.read_text()
    found: list[Snippet] = []
    blocks = list(_FENCE.finditer(text))
    for i, m in enumerate(blocks):
        if m.group(2) != "python":
            continue
        output = None
        if i + 1 < len(blocks):
            nxt = blocks[i + 1]
            if nxt.group(2) == "text" and not text[m.end():nxt.start()].strip():
                output = nxt.group(3)
        found.append(Snippet(path, text.count("\n", 0, m.start()) + 1, m.group(3), output))
    return found


ALL = [s for p in documents() for s in snippets(p)]


def _header(code: str) -> tuple[int, list[str]]:
    """(workers, needs) from the block's leading comments; ``# slow`` is a need."""
    workers, needs = 1, []
    for line in code.splitlines():
        if not line.startswith("#"):
            break
        m = re.match(r"#\s*terascale run -n (\d+)", line)
        if m:
            workers = int(m.group(1))
        if re.match(r"#\s*slow\b", line):
            needs.append("slow")
        m = re.match(r"#\s*needs:\s*(.*)", line)
        if m:
            needs += [n.strip() for n in m.group(1).split(",") if n.strip()]
    return workers, needs


def _matches(want: str, got: str) -> bool:
    w = [ln.rstrip() for ln in want.strip("\n").splitlines()]
    g = [ln.rstrip() for ln in got.strip("\n").splitlines()]
    if len(w) != len(g):
        return False
    for a, b in zip(w, g):
        pattern = ".*".join(re.escape(part) for part in a.split("..."))
        if not re.fullmatch(pattern, b):
            return False
    return True


def test_the_docs_have_snippets():
    pages = {s.path.name for s in ALL}
    assert "README.md" in pages and len(ALL) >= 10


@pytest.mark.parametrize("snippet", ALL, ids=[s.id for s in ALL])
def test_snippet_runs(snippet: Snippet, tmp_path):
    workers, needs = _header(snippet.code)
    full = os.environ.get("TERASCALE_DOCS_FULL") == "1"
    if "slow" in needs and not full:
        pytest.skip(f"{snippet.id} is marked slow: TERASCALE_DOCS_FULL=1 runs it "
                    "(make docs-snippets)")
    for module in needs:
        if module == "slow":
            continue
        name = {"spark": "pyspark", "sklearn": "sklearn"}.get(module, module)
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{snippet.id} needs {module}, which is not installed")
        if name in _SLOW_ENGINES and not full:
            pytest.skip(f"{snippet.id} starts {module} (slow): TERASCALE_DOCS_FULL=1 runs it "
                        "(make docs-snippets)")
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code)
    env = dict(os.environ, TERASCALE_QUIET="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    if workers > 1:
        cmd = [sys.executable, "-m", "terascale", "run", "-n", str(workers), "--no-prefix",
               "--timeout", "60", sys.executable, str(script)]
    else:
        cmd = [sys.executable, str(script)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, (f"{snippet.id} failed (exit {proc.returncode}):\n"
                                  f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    if snippet.output is not None:
        assert _matches(snippet.output, proc.stdout), (
            f"{snippet.id}: the page shows\n{snippet.output}\nthe program printed\n{proc.stdout}")
