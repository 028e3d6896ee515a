"""The docs say what the code does: the error tree, the documented signatures, the API pages.

* The exception tree drawn in the troubleshooting page (and in ``terascale._errors``'s
  docstring) is the class tree of ``terascale._errors``, and every error class has its entry
  there (what it means, what to do).
* Every ``name(param=default, ...)`` written in the docs' prose that names a public
  callable uses parameters that callable has, with its defaults.
* The API reference pages list every public name (``scripts/docs_api.py --check``).
* Every public parameter has an entry in its numpy-style ``Parameters`` section and every
  ``terascale`` flag a help text (``scripts/docs_api.py --undocumented``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import terascale
from terascale import _errors

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _pages() -> list[Path]:
    return [p for p in sorted(DOCS.rglob("*.md")) if "_build" not in p.parts]


def _tree(text: str) -> dict[str, str | None]:
    """{class: parent} from a drawn tree (``├── Name`` lines, four columns a level)."""
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in text.splitlines():
        m = re.match(r"^([│ ]*)(?:├── |└── )?([A-Z]\w+)\b", line)
        if not m or not m.group(2).endswith(("Error", "Timeout", "Lost", "Mismatch", "Taken",
                                             "Tampered")):
            continue
        depth = len(m.group(1)) // 4 + (1 if ("├" in line or "└" in line) else 0)
        del stack[depth:]
        parents[m.group(2)] = stack[-1] if stack else None
        stack.append(m.group(2))
    return parents


def _code_tree() -> dict[str, str | None]:
    names = set(_errors.__all__)
    tree: dict[str, str | None] = {}
    for name in names:
        cls = getattr(_errors, name)
        bases = [b.__name__ for b in cls.__bases__ if b.__name__ in names]
        tree[name] = bases[0] if bases else None
    return tree


def _drawn_tree(path: Path) -> str:
    text = path.read_text()
    m = re.search(r"```text\n(TerascaleError\n.*?)```", text, re.S)
    assert m, f"{path}: no error tree drawn"
    return m.group(1)


def test_troubleshooting_tree_is_the_code_tree():
    assert _tree(_drawn_tree(DOCS / "troubleshooting.md")) == _code_tree()


def test_errors_docstring_tree_is_the_code_tree():
    lines = (_errors.__doc__ or "").splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.strip() == "TerascaleError")
    indent = len(lines[first]) - len(lines[first].lstrip())
    assert _tree("\n".join(ln[indent:] for ln in lines[first:])) == _code_tree()


def test_every_error_class_is_explained():
    text = (DOCS / "troubleshooting.md").read_text()
    missing = [n for n in _errors.__all__ if not re.search(rf"^`{n}`\n: \S", text, re.M)]
    assert not missing, f"troubleshooting.md has no entry for {missing}"


def _public_index() -> dict[str, list[object]]:
    index: dict[str, list[object]] = {}
    for m in ["terascale", *[i.name for i in pkgutil.walk_packages(terascale.__path__,
                                                                     "terascale.")]]:
        if any(p.startswith("_") for p in m.split(".")[1:]):
            continue
        try:
            mod = importlib.import_module(m)
        except ImportError:
            continue
        for n in getattr(mod, "__all__", []):
            obj = getattr(mod, n)
            if callable(obj) and all(obj is not o for o in index.get(n, [])):
                index.setdefault(n, []).append(obj)
    return index


def _resolve(name: str, index: dict[str, list[object]]) -> object | None:
    parts = name.split(".")
    if parts[0] == "terascale":
        for cut in range(len(parts), 0, -1):
            try:
                obj: object = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                return None
            return obj
    if len(parts) == 2 and parts[0] in ("comm", "sub", "dp", "mp", "group"):
        return getattr(terascale.Communicator, parts[1], None)
    found = index.get(parts[-1], [])
    return found[0] if len(parts) == 1 and len(found) == 1 else None


def _args(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch in "([{"
        depth -= ch in ")]}"
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


DOCUMENTED = [(p, m) for p in _pages()
              for m in re.finditer(r"`([A-Za-z_][\w.]*)\(([^`]*)\)`", p.read_text())]


def test_documented_signatures_match_the_code():
    index = _public_index()
    bad, checked = [], 0
    for path, m in DOCUMENTED:
        obj = _resolve(m.group(1), index)
        if obj is None or not callable(obj):
            continue
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            continue
        params = sig.parameters
        var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
        where = f"{path.relative_to(ROOT)}: `{m.group(1)}({m.group(2)})`"
        for arg in _args(" ".join(m.group(2).split())):
            key = re.match(r"^([A-Za-z_]\w*)\s*=\s*(.*)$", arg)
            if not key:
                continue
            checked += 1
            name, value = key.group(1), key.group(2)
            if name not in params:
                if not var_kw:
                    bad.append(f"{where}: no parameter {name!r}")
                continue
            default = params[name].default
            try:
                literal = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                continue
            if default is not inspect.Parameter.empty and "..." not in value and literal != default \
                    and _looks_like_signature(m.group(2), sig):
                bad.append(f"{where}: {name} defaults to {default!r} in the code")
    assert checked >= 10, "the docs no longer name parameters: is the pattern still right?"
    assert not bad, "documented signatures differ from the code:\n" + "\n".join(bad)


def _looks_like_signature(args: str, sig: inspect.Signature) -> bool:
    """A signature (``f(model, *, every=8)``) rather than a call with chosen values: its
    positional words are the parameters' own names, in order, and no keyword's value is a
    variable (``out=x`` is a call). Keywords alone read as a signature from three on
    (``OneBitState(block=256, warmup_steps=20, momentum=None)``)."""
    names = [n for n in sig.parameters if n != "self"]
    positional = 0
    parts = _args(args)
    if all("=" in p for p in parts) and len(parts) < 3:
        return False
    for part in parts:
        if part in ("*", "/") or part.startswith("**"):
            continue
        key = re.match(r"^([A-Za-z_]\w*)\s*=\s*(.*)$", part)
        if key:
            if re.fullmatch(r"[A-Za-z_]\w*", key.group(2)) and key.group(2) not in (
                    "None", "True", "False"):
                return False
            continue
        if positional >= len(names) or part != names[positional]:
            return False
        positional += 1
    return True


def _docs_api():
    spec = importlib.util.spec_from_file_location("docs_api", ROOT / "scripts" / "docs_api.py")
    assert spec is not None and spec.loader is not None
    docs_api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docs_api)
    return docs_api


def test_api_reference_lists_every_public_name():
    docs_api = _docs_api()
    stale = [name for name, text in docs_api.pages().items()
             if not (docs_api.OUT / name).is_file() or (docs_api.OUT / name).read_text() != text]
    assert not stale, f"run python scripts/docs_api.py: {stale} out of date"


def test_every_public_parameter_and_flag_is_described():
    missing = _docs_api().undocumented()
    assert not missing, (f"{len(missing)} public parameters or flags have no description "
                         "(a numpy Parameters entry, a help text):\n" + "\n".join(missing))


def test_the_check_sees_a_missing_description():
    docs_api = _docs_api()
    doc = """What it does.

    Parameters
    ----------
    a, b : int
        Described.
    **options
        Described too.

    Examples
    --------
    c
        Not a parameter entry: another section.
    """
    assert docs_api.described(doc) == {"a", "b", "options"}
    assert docs_api.described("Nothing about ``c``: prose is not an entry.") == set()


@pytest.mark.parametrize("page", ["install.md", "quickstart.md", "concepts.md",
                                  "troubleshooting.md", "changelog.md", "reference/cli.md"])
def test_required_pages_exist(page):
    assert (DOCS / page).is_file()


def test_cli_reference_renders_the_parser():
    text = (DOCS / "reference" / "cli.md").read_text()
    assert ":func: build_parser" in text and ":module: terascale.cli" in text
