"""Write (or check) the API reference pages of the docs, one page per area.

Every public module (no ``_`` in its dotted path) is walked; each name in its ``__all__``
is documented once, in the first module (in walking order: a package before its
submodules) that exports that object. ``python scripts/docs_api.py`` rewrites
``docs/reference/api/*.md``; ``--check`` exits 1 when they differ from what the code says
(the suite runs it, so a new public name cannot go undocumented).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on a difference")
    args = parser.parse_args()
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
        extra = sorted(p.name for p in OUT.glob("*.md") if p.name not in want) if OUT.exists() else []
        stale += [f"docs/reference/api/{e} (no such area)" for e in extra]
        if stale:
            print("API reference out of date (run python scripts/docs_api.py):\n  "
                  + "\n  ".join(stale), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
