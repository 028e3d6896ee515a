"""The lines of an input that ``--invert_hash`` must read for its names, found by the
compiled parser.

VW's ``--invert_hash`` names each weight by the first feature (in the order the examples
and their features come) that hashed to it. :func:`._vwtext.feature_names` builds those
names in Python, a line at a time; naming every line took 25-30 s of CPU for 1.2M click
lines, where the compiled parser reads them in about one. So each chunk of the input is
parsed again by the compiled parser, with the run's options (its feature generation
included, ``--ignore_linear``'s namespaces kept as VW names them), into each example's
hashed indices; of the indices whose weight is to be named and has no name yet
(``pending``), the first example that has each is found with numpy, and only those lines
are handed back to be named in Python, in order. A line has the indices the names of its
features hash to, so the first line naming an index is the first one listing it: the names
are the same as from every line, from the few lines that bring a new index (a tenth of a
click log).

A line the compiled parser declines (text outside its subset, a bad line), a chunk with
a carriage return that does not end a line (Python's reading of text splits lines there),
and an input the compiled parser does not read (``.zip``, ``TERASCALE_NO_CEXT=1``) are
handed back whole, as they were read before.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Iterator
from typing import Any

from ..._lazy import lazy_module

np = lazy_module("numpy", globals(), "np")

__all__ = ["compiled_names", "lines_to_name"]


def compiled_names(path: str) -> bool:
    """Whether :func:`lines_to_name` can select the lines of ``path`` (the compiled
    parser is there and reads it)."""
    from ._vwonline import _fast

    return not path.endswith(".zip") and _fast() is not None


def lines_to_name(path: str, parse: Any, gen: Any,
                  pending: Callable[[Any], Any]) -> Iterator[tuple[int, str]]:
    """(line number from 1, text) of the lines of ``path`` that name an index
    ``pending`` still wants (``pending(indices)``: a bool for each of the masked uint32
    indices), each the first line of its chunk with such an index, in order; ``parse``:
    the run's ``ParseOptions``; ``gen``: the feature generation its compiled parser
    applied (``_vwgen.FeatureGen``, or None). ``pending`` is asked once a chunk (and
    again after a line the compiled parser declines), after the lines handed back before
    were named."""
    from ._vwonline import _DECLINED, _chunks, _Parser

    reader = _Parser(dataclasses.replace(parse, ignore_linear=()), gen)
    for text, first in _chunks(path):
        # (a lone \r ends a line of Python's text files: the chunk's lines as they read it)
        if b"\r" in text and text.count(b"\r") != text.count(b"\r\n"):
            yield from _all(bytes(text), first)
            continue
        nl = np.flatnonzero(np.frombuffer(text, np.uint8) == 10)
        start, row, declined = 0, 0, 0  # (row: the chunk's line at start)
        while start < len(text):
            status, got = reader._compiled(memoryview(text)[start:])
            nex = len(got[3])
            for r in _first_rows(np.asarray(got[0]), np.asarray(got[1]), pending):
                yield first + row + r, _line(text, nl, row + r)
            if status == 0:
                break
            row += nex
            declined += 1  # (after _DECLINED of them, the rest of the chunk)
            end = len(text) if status == 2 or declined >= _DECLINED else \
                _line_end(text, nl, row)
            start = _line_start(nl, row)
            yield from _all(bytes(text[start:end]), first + row)
            row += text.count(b"\n", start, end)
            start = end


def _first_rows(indptr: Any, idx: Any, pending: Callable[[Any], Any]) -> list[int]:
    """The examples (rows of the CSR ``indptr``, ``idx``) where each index ``pending``
    wants first appears, ascending."""
    at = np.flatnonzero(pending(idx))
    if not len(at):
        return []
    _, first = np.unique(idx[at], return_index=True)
    return np.unique(np.searchsorted(indptr, at[first], side="right") - 1).tolist()


def _line_start(nl: Any, j: int) -> int:
    return 0 if j == 0 else int(nl[j - 1]) + 1


def _line_end(text: bytearray, nl: Any, j: int) -> int:
    return int(nl[j]) + 1 if j < len(nl) else len(text)


def _line(text: bytearray, nl: Any, j: int) -> str:
    """Line ``j`` (from 0) of the chunk ``text`` (``nl``: where its line breaks are)."""
    return text[_line_start(nl, j):_line_end(text, nl, j)].decode("utf-8", "surrogateescape")


def _all(text: bytes, first: int) -> Iterator[tuple[int, str]]:
    """Every line of ``text``, numbered from ``first``, as Python's text files read them."""
    lines = io.StringIO(text.decode("utf-8", "surrogateescape"), newline=None)
    yield from enumerate(lines, first)
