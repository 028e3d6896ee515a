"""One layout of the shared-memory segment: the offsets and the calling convention that
``transport/_shmlayout.py`` and ``transport/_core.py`` (Python) and ``_shmcore.h`` /
``_shmcore.c`` (the compiled core) each write down must be the same numbers."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from terascale.transport import _core, _shmlayout

SRC = Path(_core.__file__).resolve().parents[1]


def _defines() -> dict[str, int]:
    text = (SRC / "_shmcore.h").read_text()
    return {m[1]: int(m[2]) for m in re.finditer(r"^#define (\w+) (\d+)\b", text, re.M)}


def _enum(first: str) -> list[str]:
    text = (SRC / "_shmcore.h").read_text()
    body = re.search(r"enum \{ (" + first + r"[^}]*)\}", text)
    assert body, f"no enum starting with {first} in _shmcore.h"
    return [n.strip() for n in body[1].split(",") if n.strip()]


def test_slot_offsets_are_the_headers() -> None:
    d = _defines()
    pairs = {"SLOT": _shmlayout.SLOT, "DESC_BYTES": _shmlayout.DESC_BYTES,
             "OFF_EPOCH": _shmlayout.EPOCH, "OFF_SLEEPING": _shmlayout.SLEEPING,
             "OFF_PID": _shmlayout.PID, "OFF_BASE": _shmlayout.BASE,
             "OFF_SRC": _shmlayout.SRC, "OFF_DST": _shmlayout.DST,
             "OFF_DIRECT": _shmlayout.DIRECT, "OFF_DESC": _shmlayout.DESC}
    assert {k: d.get(k) for k in pairs} == pairs
    # every OFF_ the core uses has its Python name, and the words fit in the slot
    assert {k for k in d if k.startswith("OFF_")} == {k for k in pairs if k.startswith("OFF_")}
    assert _shmlayout.DESC + 2 * _shmlayout.DESC_BYTES <= _shmlayout.SLOT


def test_calling_convention_is_the_cores() -> None:
    text = (SRC / "_shmcore.c").read_text()
    abi = re.search(r'PyModule_AddIntConstant\(m, "ABI", (\d+)\)', text)
    assert abi and int(abi[1]) == _core.ABI
    assert _enum("OP_SUM") == [f"OP_{op.upper()}" for op in sorted(_core.OPS,
                                                                   key=_core.OPS.__getitem__)]
    kinds = [f"K_{'F' if t.kind == 'f' else 'U' if t.kind == 'u' else 'I'}{t.itemsize * 8}"
             for t in sorted(_core.KINDS, key=_core.KINDS.__getitem__)]
    assert _enum("K_F32") == [*kinds, "K_COUNT"]
    assert np.dtype(np.float32) in _core.KINDS


def test_the_built_core_is_this_source() -> None:
    core = _core.load()
    if core is None:
        pytest.skip("the compiled core is not built here (TERASCALE_NO_CEXT or no compiler)")
    assert core.ABI == _core.ABI
