"""The learner's state is read by its fields' names, never by position.

``linear/_online/_state.py`` names the fields of the learner's state array (total weight,
normalized norms, L1/L2, label range, update multiplier); every other module indexes it
with those names, so that a field added or moved is one edit there. This test fails when a
module indexes something that holds the state (``state``, ``st``, ``bst``, ``x.state``,
``x.adaptive[2]``) with a number.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

import terascale
from terascale.linear._online import _state as S

SRC = Path(terascale.__file__).resolve().parent
_HOLDERS = ("state", "st", "bst")


def _positional_reads(text: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Subscript):
            continue
        seg = ast.unparse(node.value)  # (get_source_segment splits the text at each call)
        if not (seg in _HOLDERS or seg.endswith(".state") or seg.endswith("adaptive[2]")):
            continue
        sl = node.slice
        if isinstance(sl, ast.Constant) and isinstance(sl.value, int) or (
                isinstance(sl, ast.Slice) and any(isinstance(b, ast.Constant)
                                                  for b in (sl.lower, sl.upper))):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_reads_the_state_by_position():
    bad = []
    for area in ("linear", "engines"):
        for path in sorted((SRC / area).rglob("*.py")):
            if path == Path(S.__file__).resolve():
                continue
            bad += [f"{path.relative_to(SRC.parent)}:{line}: {seg}"
                    for line, seg in _positional_reads(path.read_text())]
    assert not bad, ("name the field (terascale.linear._online._state) instead of its "
                     "position:\n" + "\n".join(bad))
    probe = ("lo = state[4]\nhi = model.adaptive[2][5]\nr = st[4:6]\nok = state[MIN_LABEL]\n"
             "whole = state[:len(other)]\n")
    assert [seg for _, seg in _positional_reads(probe)] == [
        "state[4]", "model.adaptive[2][5]", "st[4:6]"]


def test_the_fields_are_distinct_and_a_new_state_is_a_fresh_learner():
    fields = [S.TOTAL_WEIGHT, S.SUM_NORM_X, S.CONTRACTION, S.GRAVITY, S.MIN_LABEL,
              S.MAX_LABEL, S.UPDATE_MULTIPLIER]
    assert sorted(fields) == list(range(S.STATE_SIZE))
    st = S.new_state(min_label=-2.0, max_label=3.0)
    assert st.shape == (S.STATE_SIZE,) and st.dtype == np.float64
    assert (st[S.MIN_LABEL], st[S.MAX_LABEL]) == (-2.0, 3.0)
    assert st[S.CONTRACTION] == st[S.UPDATE_MULTIPLIER] == 1.0
    assert st[S.TOTAL_WEIGHT] == st[S.SUM_NORM_X] == st[S.GRAVITY] == 0.0
