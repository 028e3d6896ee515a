"""Vowpal Wabbit's prediction outputs (``-p``, ``-r``): the link of raw scores, the lines,
and the files they go to (written whole or not at all).

Apart from :mod:`._vwtext` (``--readable_model``, ``--invert_hash``) so that a run that
writes predictions only (the compiled one-worker learner, :mod:`._vwonline`) imports no
numba.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from ..._files import make_public, replaceable, storage_error
from ..._lazy import lazy_module

np = lazy_module("numpy", globals(), "np")

__all__ = ["AtomicText", "LiteralPath", "all_or_none", "link", "link_one", "predicted", "prediction_lines",
           "prediction_writers"]


def link(scores: np.ndarray, how: str, binary: bool) -> np.ndarray:
    """VW's output of raw scores: ``--binary`` signs (a score of 0 is -1, as in VW), else
    ``--link logistic`` probabilities, ``--link glf1`` the logistic stretched to (-1, 1)
    (``2 / (1 + exp(-score)) - 1``), ``--link poisson`` rates exp(score), each in float
    as VW computes them, else the scores (``--link identity``)."""
    if binary:
        return np.where(scores > 0, 1.0, -1.0)
    if how in _LINK_CODES:  # (in float, with C's expf, as VW's scorer)
        return _link32(np.ascontiguousarray(scores, np.float32), how).astype(np.float64)
    return scores


_LINK_CODES = {"logistic": 0, "glf1": 1, "poisson": 2}  # _vwfast.link's codes


def predicted(fast: Any, scores: Any, how: str, binary: bool) -> array:
    """-p's values of the float64 ``scores`` (a buffer), as :func:`link` gives them and VW
    writes them, each a float32: the compiled core's ``predicted``, no numpy."""
    out = array("d", bytes(8 * len(scores)))
    fast.predicted(scores, out, -2 if binary else _LINK_CODES.get(how, -1))
    return out


def link_one(score: float, how: str, binary: bool) -> float:
    """:func:`link` of one score (the progress table's ``current predict``)."""
    if binary:
        return 1.0 if score > 0 else -1.0
    if how not in _LINK_CODES:
        return float(score)
    from ..._cext import load
    from . import VWFAST

    fast = load(*VWFAST)
    if fast is None:
        return float(link(np.array([score]), how, binary)[0])
    return predicted(fast, array("d", [score]), how, binary)[0]


def _link32(scores: np.ndarray, how: str) -> np.ndarray:
    """VW's link of float32 scores in float: the compiled core's loop, else numba's kernel
    (importing numba costs a one-line run more than the rest of it)."""
    from ..._cext import load
    from . import VWFAST

    fast = load(*VWFAST)
    if fast is None:
        from ._vwlinknb import link32

        return link32(scores, _LINK_CODES[how])  # type: ignore[no-any-return]
    out = np.empty_like(scores)
    fast.link(scores, out, _LINK_CODES[how])
    return out


def _num(v: float) -> str:
    """A prediction as VW writes it: a whole number without decimals (std::fixed,
    precision 0), else 6 decimals; a NaN with its sign, as C's printf (``-nan``: the
    sign bit that x86's invalid operations, such as inf - inf, leave set)."""
    if math.isfinite(v) and v == math.floor(v):
        return str(int(v))
    if v != v:
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    return f"{v:.6f}"


def prediction_lines(values: np.ndarray, tags: Sequence[str] | None) -> str:
    """VW's -p lines for these predictions (``value tag`` where an example has a tag)."""
    vals = values.astype(np.float32).astype(np.float64)  # VW's predictions are float32
    from .._online._progressive import BlockTags
    from ._vwtext_fast import format_predictions

    if isinstance(tags, BlockTags):  # (the block's tag bytes, read in C)
        fast = format_predictions(vals, tags.block.tag_ptr, tags.block.tag_blob, tags.start)
    else:
        fast = format_predictions(vals) if tags is None else None
    if fast is not None:
        return fast
    if tags is None:
        return "".join(_num(v) + "\n" for v in vals.tolist())
    return "".join(f"{_num(v)} {t}\n" if t else _num(v) + "\n"
                   for v, t in zip(vals.tolist(), tags))


class LiteralPath(str):
    """A file name taken as written: ``-`` is a file of that name, as VW's ``-p -`` and
    ``-r -`` write one, not standard output (``terascale linear``'s ``-p -``)."""


class AtomicText:
    """A text file that appears (renamed into place, fsynced) only when closed without error:
    an interrupted run leaves no half-written output behind."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._tmp: str | None = None
        if path == "/dev/stdout" or (path == "-" and not isinstance(path, LiteralPath)):
            self.file: TextIO = sys.stdout
        elif path == "/dev/stderr":
            self.file = sys.stderr
        elif not replaceable(path):  # /dev/stdout, a pipe, a link: write through it
            self.file = open(path, "w", encoding="utf-8",  # noqa: SIM115 (closed in
                             errors="surrogateescape")      # commit/discard)
        else:
            d = os.path.dirname(os.path.abspath(path))
            fd, self._tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
            make_public(fd)
            self.file = os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape")

    def write(self, text: str) -> None:
        try:
            try:
                self.file.write(text)
            except UnicodeEncodeError:  # a tag or name of bytes that are not UTF-8, to
                self.file.flush()       # standard output: written as they were read
                self.file.buffer.write(text.encode("utf-8", "surrogateescape"))
        except BrokenPipeError:
            raise  # `-p /dev/stdout | head`: the caller ends quietly
        except OSError as e:  # disk full, quota, EIO: one line naming the file
            raise storage_error("cannot write", self.path, e) from None

    def commit(self) -> None:
        try:
            self.file.flush()
            if self._tmp is None:
                if self.file not in (sys.stdout, sys.stderr):
                    self.file.close()
                return
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self._tmp, self.path)
        except BrokenPipeError:
            raise
        except OSError as e:
            self.discard()
            raise storage_error("cannot write", self.path, e) from None

    def discard(self) -> None:
        if self.file not in (sys.stdout, sys.stderr):
            try:
                self.file.close()
            except OSError:  # the buffered rest cannot be written either: it is dropped
                pass
        if self._tmp is not None and os.path.exists(self._tmp):
            os.unlink(self._tmp)


def prediction_writers(args: argparse.Namespace) -> list[tuple[AtomicText, bool]]:
    """The ``-p`` (linked: True) and ``-r`` (raw: False) files of a VW command line, each an
    :class:`AtomicText`, in that order; those not asked for are left out."""
    raw = getattr(args, "raw_predictions", None)
    return [(AtomicText(path), linked) for path, linked in
            ((args.predictions, True), (raw, False)) if path]


@contextlib.contextmanager
def all_or_none(writers: list[tuple[AtomicText, bool]]) -> Iterator[None]:
    """Commit every writer once the block ends; discard every one if it raises (a run
    that fails leaves no partial prediction file)."""
    try:
        yield
    except BaseException:
        for writer, _ in writers:
            writer.discard()
        raise
    for writer, _ in writers:
        writer.commit()


