"""Write (or check) the API reference pages of the docs, one page per area.

Every public module (no ``_`` in its dotted path) is walked; each name in its ``__all__``
is documented once, in the first module (in walking order: a package before its
submodules) that exports that object. ``python scripts/docs_api.py`` rewrites
``docs/reference/api/*.md``; ``--check`` exits 1 when they differ from what the code says
(the suite runs it, so a new public name cannot go undocumented), or when a public parameter
or a ``terascale`` flag has no description (:func:`undocumented` says which).

A parameter is described when its name has an entry in the numpy-style ``Parameters`` (or
``Other Parameters``) section of its callable's docstring (or a ``:param name:`` field): a function's; a class's (or its
``__init__``'s) for the constructor, where a dataclass field may instead carry a ``#:``
comment (autodoc shows it under the field); a method's, or the same method's on a terascale
base class it implements. A method that overrides another library's (torch's
``ProcessGroup.allreduce``, pyspark's ``Estimator.fit``) takes that library's parameters
and its documentation. A flag is described when it has a help text.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "reference" / "api"

# area -> title, in the order the index lists them
AREAS = {
    "": "terascale (top level)",
    "communicator": "terascale.communicator",
    "collectives": "terascale.collectives",
    "linear": "terascale.linear",
    "torch": "terascale.torch",
    "engines": "terascale.engines, terascale.spark, terascale.ray, terascale.dask",
    "launch": "terascale.launch",
    "rendezvous": "terascale.rendezvous",
    "transport": "terascale.transport",
    "sim": "terascale.sim",
    "bench": "terascale.bench",
    "testing": "terascale.testing",
    "cli": "terascale.cli",
}
# modules that re-export another area's objects document under that area
ALIAS_AREA = {"spark": "engines", "ray": "engines", "dask": "engines"}


def public_modules() -> list[str]:
    import terascale

    names = ["terascale"]
    for m in pkgutil.walk_packages(terascale.__path__, "terascale."):
        if not any(p.startswith("_") for p in m.name.split(".")[1:]):
            names.append(m.name)
    return names


def pages() -> dict[str, str]:
    seen: dict[int, str] = {}
    by_area: dict[str, list[str]] = {a: [] for a in AREAS}
    mods = public_modules()
    # engines before the terascale.spark / terascale.ray aliases
    mods.sort(key=lambda n: (n.split(".")[1] in ALIAS_AREA if n.count(".") else False))
    for name in mods:
        module = importlib.import_module(name)
        parts = name.split(".")
        area = parts[1] if len(parts) > 1 else ""
        area = ALIAS_AREA.get(area, area)
        members, skipped = [], []
        for attr in getattr(module, "__all__", []):
            if attr == "__version__":
                continue
            obj = getattr(module, attr)
            key = id(obj)
            if isinstance(obj, (int, float, str, tuple, dict, frozenset, bytes)) or obj is None:
                key = hash((name, attr))  # constants: documented where they are defined
            if key in seen:
                skipped.append(attr)
                continue
            seen[key] = f"{name}.{attr}"
            members.append(attr)
        lines = ["```{eval-rst}", f".. automodule:: {name}"]
        if members:
            lines.append(f"   :members: {', '.join(members)}")
            lines.append("   :undoc-members:")
            if skipped:
                lines.append(f"   :exclude-members: {', '.join(skipped)}")
        else:
            lines.append("   :no-members:")
        lines.append("```")
        header = f"## `{name}`\n" if name != "terascale" else ""
        by_area[area].append(header + "\n" + "\n".join(lines) + "\n")
    out = {}
    for area, title in AREAS.items():
        slug = area or "terascale"
        body = "\n".join(by_area[area])
        out[f"{slug}.md"] = (f"# {title}\n\n<!-- written by scripts/docs_api.py; do not edit -->\n\n"
                             f"{body}")
    return out


def described(doc: str | None) -> set[str]:
    """The names with an entry in a numpy-style ``Parameters`` section of ``doc`` (or a
    Sphinx ``:param name:`` field, which renders the same)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    names = set(re.findall(r"^\s*:param (?:[^:]+ )?\*{0,2}(\w+):", doc or "", re.M))
    section = False
    for i, line in enumerate(lines):
        if re.fullmatch(r"-{3,}", line.strip()):
            continue
        if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1].strip()) and line.strip():
            section = line.strip() in ("Parameters", "Other Parameters")
            continue
        if section and re.fullmatch(r"\*{0,2}\w+(\s*,\s*\*{0,2}\w+)*(\s+:.*)?", line):
            for name in line.split(" : ")[0].split(","):
                names.add(name.strip().lstrip("*"))
    return names


def _parameters(obj: object) -> list[str]:
    try:
        sig = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []
    return [n for n in sig.parameters if n not in ("self", "cls") and not n.startswith("_")]


def _ours(obj: object) -> bool:
    return (getattr(obj, "__module__", None) or "").startswith("terascale")


def _field_comments(cls: type) -> set[str]:
    """Dataclass fields with a ``#:`` comment (what autodoc shows under the field)."""
    from sphinx.pycode import ModuleAnalyzer

    out: set[str] = set()
    for base in cls.__mro__:
        if not _ours(base):
            continue
        try:
            docs = ModuleAnalyzer.for_module(base.__module__).find_attr_docs()
        except Exception:  # noqa: BLE001 - no source (a compiled module): no comments
            continue
        out |= {attr for (owner, attr), text in docs.items()
                if owner == base.__qualname__ and "".join(text).strip()}
    return out


def _constructor_described(cls: type) -> set[str] | None:
    """What the constructor's documentation describes; None: not ours to document."""
    own_init = any(_ours(getattr(vars(b).get(name), "__func__", vars(b).get(name)))
                   for b in cls.__mro__ if _ours(b) for name in ("__init__", "__new__"))
    if not (own_init or dataclasses.is_dataclass(cls) or hasattr(cls, "_fields")):
        return None
    names: set[str] = set()
    for base in cls.__mro__:  # a subclass keeps its base's constructor and its documentation
        if base is cls or (_ours(base) and ("__init__" in vars(base) or "__new__" in vars(base))):
            names |= described(base.__doc__) | described(getattr(vars(base).get("__init__"),
                                                                  "__doc__", None))
    if dataclasses.is_dataclass(cls) or hasattr(cls, "_fields"):
        names |= _field_comments(cls)
    return names


def _method_described(cls: type, name: str) -> set[str] | None:
    """What the docs of method ``name`` (its own, or a terascale base's) describe; None: it
    overrides another library's method, whose documentation is the reference."""
    names: set[str] = set()
    for base in cls.__mro__:
        if name not in vars(base):
            continue
        if not _ours(base):
            return None
        raw = vars(base)[name]
        raw = getattr(raw, "__func__", raw)
        names |= described(getattr(raw, "__doc__", None))
    return names


def _cli_undocumented() -> list[str]:
    from terascale.cli import build_parser

    out: list[str] = []

    def walk(parser: argparse.ArgumentParser, prog: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help for a in action._choices_actions}
                for name, sub in action.choices.items():
                    if name in helps and not helps[name]:
                        out.append(f"{prog} {name} (the sub-command has no help)")
                    walk(sub, f"{prog} {name}")
                continue
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                if action.help == argparse.SUPPRESS:
                    continue
                flag = "/".join(action.option_strings) or action.metavar or action.dest
                out.append(f"{prog} {flag} (no help)")

    walk(build_parser(), "terascale")
    return out


def undocumented() -> list[str]:
    """Every public parameter with no description, as ``module.name(param)``, and every
    ``terascale`` flag with no help text (see the module docstring for the rules)."""
    out: list[str] = []
    seen: set[int] = set()
    for modname in public_modules():
        module = importlib.import_module(modname)
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr)
            if id(obj) in seen or not callable(obj) or not _ours(obj):
                continue
            seen.add(id(obj))
            where = f"{modname}.{attr}"
            if not inspect.isclass(obj):
                have = described(obj.__doc__)
                out += [f"{where}({p})" for p in _parameters(obj) if p not in have]
                continue
            if issubclass(obj, enum.Enum):
                continue
            have_init = _constructor_described(obj)
            if have_init is not None:
                out += [f"{where}({p})" for p in _parameters(obj) if p not in have_init]
            for name in sorted(dir(obj)):
                if name.startswith("_"):
                    continue
                raw = inspect.getattr_static(obj, name)
                func = getattr(raw, "__func__", raw)
                if isinstance(raw, property) or not inspect.isfunction(func) or not _ours(func):
                    continue
                have = _method_described(obj, name)
                if have is None:
                    continue
                out += [f"{where}.{name}({p})" for p in _parameters(func) if p not in have]
    return out + _cli_undocumented()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on a difference")
    parser.add_argument("--undocumented", action="store_true",
                        help="only list the public parameters and flags with no description")
    args = parser.parse_args()
    if args.undocumented:
        missing = undocumented()
        print("\n".join(missing))
        return 1 if missing else 0
    stale = []
    want = pages()
    if not args.check:
        OUT.mkdir(parents=True, exist_ok=True)
    for fname, text in want.items():
        path = OUT / fname
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text)
    if args.check:
        missing = undocumented()
        if missing:
            print(f"{len(missing)} public parameters or flags have no description:\n  "
                  + "\n  ".join(missing), file=sys.stderr)
        extra = sorted(p.name for p in OUT.glob("*.md") if p.name not in want) if OUT.exists() else []
        stale += [f"docs/reference/api/{e} (no such area)" for e in extra]
        if stale:
            print("API reference out of date (run python scripts/docs_api.py):\n  "
                  + "\n  ".join(stale), file=sys.stderr)
        if stale or missing:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
