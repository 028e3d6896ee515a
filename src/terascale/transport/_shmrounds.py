"""The compiled core's side of a shared-memory group: its waits and its multi-round calls.

:class:`~terascale.transport.shmgroup.ShmGroup` inherits these; one call of the core
(``_shmcore.c``, ``_shmdirect.c``) publishes, arrives, spins with the GIL released,
folds and goes on to the next round, so a loop of rounds costs no Python per round. A
call that cannot complete a round (a member not there within the core's sleep,
``CORE_SLEEP_S``, or one that announced another collective) hands it back: the caller
then waits in Python with the link and deadline checks (``ShmGroup.finish``), folds that
round and calls again. The spin policy both paths follow is :class:`.SpinBudget`'s.

Rounds are counted in :attr:`CoreRounds.epoch` (barriers arrived at) and
:attr:`CoreRounds.round` (whose parity picks the set of areas), which the group's
Python barriers advance as well. With the core both live in it (``Group.epoch``,
``Group.round``): a prepared small collective (``Group.prepare``, ``_shmsmall.c``)
advances them in the same call that moves the data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _spin
from ._shmwait import SpinBudget

__all__ = ["CoreRounds", "Counts"]


class Counts:
    """Where the pure-Python path keeps the counters the compiled core keeps in C."""

    __slots__ = ("epoch", "round")


class CoreRounds:
    """The compiled core's rounds over a mapped group (``core`` set: ``Group`` of
    ``_shmcore``)."""

    core: Any  # the compiled core's Group (None: the pure-Python path)
    _counts: Any  # the core, or a Counts
    descriptor: bytes  # what we announced for the current collective
    spin: SpinBudget

    @property
    def epoch(self) -> int:
        """Barriers arrived at."""
        return int(self._counts.epoch)

    @epoch.setter
    def epoch(self, value: int) -> None:
        self._counts.epoch = value

    @property
    def round(self) -> int:
        """Rounds run so far: the set of round r is r % 2."""
        return int(self._counts.round)

    @round.setter
    def round(self, value: int) -> None:
        self._counts.round = value

    def spin_budget(self, running: bool) -> float:
        """Seconds the core may spin before it sleeps (:meth:`.SpinBudget.budget`).

        Parameters
        ----------
        running
            Every member already passed a barrier of this collective (a later round), so the wait
            may spin for it.
        """
        return self.spin.budget(running)

    def wait_policy(self, running: bool) -> tuple[float, int, float]:
        """How the core waits: (spin seconds, yield mode, sleep seconds before it hands the
        wait back to :meth:`.PythonWaits.finish`).

        Parameters
        ----------
        running
            Every member already passed a barrier of this collective (a later round), so the wait
            may spin for it.
        """
        return self.spin.core_policy(running)

    def settle(self, running: bool, slept: bool = False) -> None:
        """A wait of the core completed: the adaptive budget learns from it
        (:meth:`.SpinBudget.settle`).

        Parameters
        ----------
        running
            Every member already passed a barrier of this collective (a later round), so the wait
            may spin for it.
        slept
            Whether the wait had to sleep (default False).
        """
        self.spin.settle(running, slept)

    def core_round(self, src: np.ndarray, dst: np.ndarray, tag: bytes | None, kind: int,
                   op: int, own: bool, *, running: bool) -> int:
        """One round of the flat allreduce in the compiled core (:attr:`core` is set).

        Publishes ``src`` into our area of this round's set (and ``tag``, the collective's
        descriptor, unless None), arrives, spins, and when every member arrived (and, with
        ``tag``, announced the same collective) folds the set into ``dst`` (``op`` < 0:
        no fold) and returns -1. Otherwise it returns the first member that has not
        arrived (or ``-2 - i`` for a member ``i`` that announced something else): then
        call :meth:`.PythonWaits.finish` (which waits, checks and raises as
        :meth:`.ShmGroup.barrier` does) and fold. Either way the caller advances :attr:`round` afterwards.

        Parameters
        ----------
        src
            This rank's input (a contiguous array).
        dst
            Where the folded result goes (same shape and dtype).
        tag
            The collective's descriptor (:meth:`ShmGroup.tag_of`) to publish and check, or None.
        kind
            The compiled core's dtype code (:func:`core_codes`).
        op
            The compiled core's op code; < 0: no fold.
        own
            Whether ``src`` is already in our area (no copy).
        running
            Every member already passed a barrier of this collective (a later round), so the wait
            may spin for it.
        """
        self.epoch += 1
        if tag is not None:
            self.descriptor = tag
        core = self.core
        assert core is not None
        slept = core.sleeps
        status: int = core.allreduce(src, dst, tag, self.epoch, self.round & 1, kind, op, own,
                                     *self.wait_policy(running))
        if status == -1:
            self.settle(running, core.sleeps != slept)
        return status

    def core_flat(self, src: np.ndarray, dst: np.ndarray, tag: bytes | None, kind: int,
                  op: int, own: bool, chunk: int, *,
                  running: bool) -> tuple[int, int, int] | None:
        """Rounds of ``chunk`` bytes of the flat allreduce in the compiled core, folding
        each (``op`` >= 0); ``tag`` as in :meth:`core_round` (round 0 only).

        None when every round completed (:attr:`round` advanced past them). Otherwise
        ``(status, lo, hi)``: the elements ``[lo, hi)`` of the round we arrived at but
        that did not complete (``status`` as :meth:`core_round` returns it): call
        :meth:`.PythonWaits.finish`, fold it, advance :attr:`round`, go on from ``hi``.

        Parameters
        ----------
        src
            This rank's input (a contiguous array).
        dst
            Where the folded result goes (same shape and dtype).
        tag
            The collective's descriptor (:meth:`ShmGroup.tag_of`) to publish and check, or None.
        kind
            The compiled core's dtype code (:func:`core_codes`).
        op
            The compiled core's op code; < 0: no fold.
        own
            Whether ``src`` is already in our area (no copy).
        chunk
            Bytes per round.
        running
            Every member already passed a barrier of this collective (a later round), so the wait
            may spin for it.
        """
        if tag is not None:
            self.descriptor = tag
        core = self.core
        assert core is not None
        later = self.spin_budget(True) if src.nbytes > chunk else 0.0  # one round: unused
        yield_mode = self.spin.rounds_yield()
        slept = core.sleeps
        done, status = core.flat(src, dst, tag, self.epoch, self.round, chunk, kind, op, own,
                                 self.spin_budget(running), later, yield_mode,
                                 _spin.CORE_SLEEP_S)
        self.round += done
        if status == -1:
            self.epoch += done
            self.settle(running, core.sleeps != slept)
            return None
        self.epoch += done + 1
        per = chunk // src.itemsize
        return status, done * per, min((done + 1) * per, src.size)

    def core_direct(self, src: np.ndarray, dst: np.ndarray, tag: bytes | None, kind: int,
                    op: int, chunk: int, phases: int, phase: int = 0, *,
                    running: bool = False) -> tuple[int, int, int] | None:
        """The direct schedule's ``phases`` phases from ``phase`` in the compiled core
        (``collectives/_shmdirect.py`` drives it); ``tag`` as in :meth:`core_round`.

        None when the collective completed (:attr:`epoch` and :attr:`round` advanced past
        it). Otherwise ``(phase, status, errno)`` as ``Group.direct`` returns it, with
        :attr:`epoch` at the last barrier we arrived at (so :meth:`.PythonWaits.finish` waits for it
        when ``errno`` is 0; else see :meth:`.PythonWaits.read_failed`).

        Parameters
        ----------
        src
            This rank's input (a contiguous array).
        dst
            Where the folded result goes (same shape and dtype).
        tag
            The collective's descriptor (:meth:`ShmGroup.tag_of`) to publish and check, or None.
        kind
            The compiled core's dtype code (:func:`core_codes`).
        op
            The compiled core's op code; < 0: no fold.
        chunk
            Bytes per round.
        phases
            Phases to run.
        phase
            The phase to start from (default 0).
        running
            Every member already passed a barrier of this collective (a later round), so the wait
            may spin for it.
        """
        core = self.core
        assert core is not None
        if tag is not None:
            self.descriptor = tag
        base = self.epoch - phase  # phase k's barrier is at base + 1 + k
        slept = core.sleeps
        if phase < phases:
            later = self.spin_budget(True)
            yield_mode = self.spin.rounds_yield()
            done, status, err = core.direct(
                src, dst, tag, base, self.round, phase, kind, op, chunk,
                self.spin_budget(running) if phase == 0 else later, later, yield_mode,
                _spin.CORE_SLEEP_S)
            if status != -1:
                self.epoch = base + done + (0 if err else 1)
                return done, status, err
        self.epoch = base + phases
        self.round += phases
        if phase == 0 and core.sleeps == slept:  # (sleeps of the long phases say nothing
            self.settle(running)                  # about idle members: no shrinking)
        return None
