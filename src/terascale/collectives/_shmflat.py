"""The flat shared-memory schedule's shared pieces: when it runs, how it cuts, the fast path.

Every member must cut a flat allreduce into the same rounds (``FLAT_ROUND_BYTES``) and
choose the flat schedule alike (``FLAT_MAX_N``, ``FLAT_MAX_BYTES``), whether it runs the
compiled core or the pure-Python path; this module owns those numbers and their
reasons. It also holds what drives the core's flat calls to completion
(:func:`finish_flat`, when a member was late) and the communicator's per-call fast path
(:class:`FastAllreduce`), which runs a whole small allreduce in one call of the core
before any exchange exists. :class:`~terascale.collectives.shm.ShmAllreduce` runs the
schedules themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._arrays import ReduceOp
from ..transport import Exchange
from ..transport.shmgroup import ShmGroup, core_codes, desc_field, slot_tag, tag_field
from ._shmdirect import finish_direct, start_direct, takes_direct

if TYPE_CHECKING:
    from .shm import ShmGroups

__all__ = ["FLAT_MAX_BYTES", "FLAT_MAX_N", "FLAT_ROUND_BYTES", "FastAllreduce", "finish_flat",
           "flat_rounds"]

# The flat schedule's rounds: the round's input, our area and the others' areas stay in L2
# (1-2 MiB a core on current x86) while the round is copied in and folded; the largest
# round that does, since every round is a barrier and on a loaded host a barrier may cost
# a sleep. Both paths use it: every member must cut alike.
FLAT_ROUND_BYTES = 256 << 10
# Flat while n * bytes <= this: above it every member's reading of every area costs more
# than the scatter schedule's extra copy (with four members, from 256 KiB a member).
FLAT_MAX_BYTES = 512 << 10
# With two members the flat schedule wins at every size: it streams through the areas in
# rounds with one barrier each, and its redundant reads cost the same as the scatter
# schedule's extra copy.
FLAT_MAX_N = 2


class FastAllreduce:
    """A blocking flat allreduce of at most one area through the compiled core, started
    before any :class:`~terascale.transport.base.Exchange` exists.

    The communicator's per-call path for small and medium messages: when every member is
    ready, :meth:`start` does the whole collective in one call of the core (publish,
    arrive, spin, compare descriptors, fold) and no exchange is ever built. Otherwise the
    communicator builds the exchange and :meth:`finish` waits for the late members with
    every failure check of :meth:`ShmGroup.finish` (deadline, dead or failed members,
    mismatched collectives). Same bits as :class:`ShmAllreduce`: the same fold, the same
    descriptor (``desc``, the collective's as the exchange would carry it).

    Parameters
    ----------
    g
        The shared-memory group (segment) of the ranks.
    kind
        The compiled core's dtype code.
    opcode
        The compiled core's op code.
    desc
        The collective's descriptor (name, shape, dtype, op), compared across ranks.
    context
        The communicator's context id.
    direct
        Run the direct schedule (cross-memory attach) instead of the flat one (default False).
    """

    __slots__ = ("context", "direct", "field", "g", "held", "kind", "opcode", "start")

    def __init__(self, g: ShmGroup, kind: int, opcode: int, desc: str, context: int, *,
                 direct: bool = False) -> None:
        self.g = g
        self.kind = kind
        self.opcode = opcode
        self.context = context
        self.field = tag_field(desc)
        self.direct = direct  # the direct schedule (collectives/_shmdirect.py), not flat
        # start(seq, src, dst): None when done, else what finish() continues from. A
        # collective of one flat round gets the core's prepared call (plan()), which does
        # the whole per-call work in C.
        self.start = self._start
        # A direct call's buffers while it is unfinished: other members may write into
        # them, so they must outlive a failure before finish() (which keeps them then).
        self.held: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def plan(cls, groups: ShmGroups, op: ReduceOp, nbytes: int, desc: str,
             context: int) -> FastAllreduce | None:
        """The fast path for this shape, if the whole segment exists and has the core.

        Parameters
        ----------
        groups
            The communicator's shared-memory segments.
        op
            The reduction (op and dtype).
        nbytes
            The message size in bytes.
        desc
            The collective's descriptor (name, shape, dtype, op), compared across ranks.
        context
            The communicator's context id.
        """
        g = groups.whole
        codes = core_codes(op.dtype, op.name)
        if g is None or g.core is None or codes is None or g.n < 2:
            return None
        if takes_direct(g, nbytes, codes[0]):
            return cls(g, *codes, desc, context, direct=True)
        if g.n > FLAT_MAX_N and nbytes * g.n > FLAT_MAX_BYTES:
            return None
        fast = cls(g, *codes, desc, context)
        if nbytes <= FLAT_ROUND_BYTES:
            fast.start = g.core.prepare(context, fast.field, fast.kind, fast.opcode,
                                        FLAT_ROUND_BYTES).run
        return fast

    def _start(self, seq: int, src: np.ndarray,
               dst: np.ndarray) -> tuple[int, int, int] | None:
        """Collective ``seq`` of ``src`` into ``dst`` (C-contiguous, equal, the same or
        disjoint): None when done, else what :meth:`finish` continues from."""
        tag = slot_tag(seq, self.context, self.field)
        if self.direct:
            pending = start_direct(self.g, src, dst, tag, self.kind, self.opcode)
            if pending is not None:
                self.held = (src, dst)
            return pending
        return self.g.core_flat(src, dst, tag, self.kind,
                                self.opcode, True, FLAT_ROUND_BYTES, running=False)

    def finish(self, ex: Exchange, pending: tuple[int, int, int], src: np.ndarray,
               dst: np.ndarray) -> None:
        """Complete a collective :meth:`start` left pending: wait for the late members in ``ex``, with every failure check, and fold.

        Parameters
        ----------
        ex
            The exchange the communicator built for the late members.
        pending
            What :meth:`start` returned.
        src
            This rank's input, flat and C-contiguous.
        dst
            Where the result goes (same size; may be ``src``).
        """
        if self.direct:
            finish_direct(self.g, ex, ex.deadline, pending, src, dst, self.kind, self.opcode)
            self.held = None
            return
        self.g.descriptor = desc_field(ex)  # the prepared call wrote it in C only
        finish_flat(self.g, ex, ex.deadline, pending, src.reshape(-1), dst.reshape(-1),
                    self.kind, self.opcode, True)


def flat_rounds(size: int, itemsize: int) -> list[tuple[int, int]]:
    """The flat schedule's rounds of ``size`` elements: ``FLAT_ROUND_BYTES`` each, the last
    shorter, at least one. The compiled core cuts the same way (every member must)."""
    per = FLAT_ROUND_BYTES // itemsize
    return [(lo, min(lo + per, size)) for lo in range(0, size, per)] or [(0, 0)]


def finish_flat(g: ShmGroup, ex: Exchange, deadline: float, pending: tuple[int, int, int],
                src: np.ndarray, dst: np.ndarray, kind: int, opcode: int, own: bool) -> None:
    """Complete a :meth:`ShmGroup.core_flat` that returned ``pending``: wait for the late
    members of that round (every failure check of :meth:`ShmGroup.finish`), fold it, and
    run the remaining rounds, as often as members are late."""
    while True:
        status, lo, hi = pending
        g.finish(ex, deadline, check=lo == 0, running=lo != 0, spun=status >= 0)
        assert g.core is not None
        if opcode >= 0:
            g.core.fold(src[lo:hi], dst[lo:hi], g.round & 1, kind, opcode, own)
        g.round += 1
        if hi >= src.size:
            return
        rest = g.core_flat(src[hi:], dst[hi:], None, kind, opcode, own, FLAT_ROUND_BYTES,
                           running=True)
        if rest is None:
            return
        pending = (rest[0], hi + rest[1], hi + rest[2])
