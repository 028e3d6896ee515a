"""How long a member of a shared-memory group spins before it blocks: the adaptive budget.

The constants and their measurements are :mod:`._spin`'s; this is the per-group state
that applies them, owned by one :class:`~terascale.transport.shmgroup.ShmGroup` and shared by
its two wait paths (the compiled core's, in C, and the pure-Python loop), so both learn
the same budget:

* waits for an idle member adapt, as adaptive mutexes do: a wait that ended while
  spinning doubles the budget, one that had to block halves it (``MIN_SPIN_S`` ..
  ``SPIN_S``). On an idle host every rank has a core and spinning wins; on a loaded one
  the member we wait for may need ours;
* a member known to be running this collective gets ``RUNNING_SPIN_S`` unless the host
  is busy (:func:`._spin.host_busy`);
* more members than cores: at most ``OVERSUBSCRIBED_SPIN_S``, with a yield after every
  poll, and only where the yields reach the other members (:attr:`share_cores`, set once
  their pids are known: :func:`._spin.share_scheduler`); otherwise no spin at all.
"""

from __future__ import annotations

from typing import Any

from . import _spin
from ._spin import CORE_SLEEP_S, MIN_SPIN_S, RUNNING_SPIN_S, SPIN_S, YIELD_WHILE_SPINNING

__all__ = ["SpinBudget"]


class _State:
    """Where the pure-Python path keeps what the compiled core keeps in C."""

    __slots__ = ("share_cores", "spin_s")


class SpinBudget:
    """The spin policy of one group of ``n`` members on this host.

    With the compiled core (``core``, its ``Group``) the adaptive budget and
    :attr:`share_cores` live in the core, which applies and adapts them itself in a
    prepared small collective's call (``_shmsmall.c``); this object sets the core's copy of
    the policy's numbers and reads and writes the same two fields."""

    def __init__(self, n: int, core: Any = None) -> None:
        self.oversubscribed = n > _spin.CORES
        # The core's yield mode while it spins (see _shmcore.c, spin_wait).
        self.yield_mode = 2 if self.oversubscribed else int(YIELD_WHILE_SPINNING)
        self.cap = _spin.OVERSUBSCRIBED_SPIN_S if self.oversubscribed else SPIN_S
        self._state: Any = _State() if core is None else core
        if core is not None:
            core.spin_min, core.spin_cap = MIN_SPIN_S, self.cap
            core.oversub_cap, core.block_s = _spin.OVERSUBSCRIBED_SPIN_S, CORE_SLEEP_S
            core.waking_spin_s, core.yield_after_s = _spin.WAKING_SPIN_S, _spin.YIELD_AFTER_S
            core.busy_check_s, core.cores = _spin.BUSY_CHECK_S, _spin.CORES
            core.oversub, core.yield_mode = self.oversubscribed, self.yield_mode
        self.spin_s = SPIN_S
        self.share_cores = False  # whether our yields reach the other members

    @property
    def spin_s(self) -> float:
        """Seconds a wait for an idle member spins before it sleeps (adaptive)."""
        return float(self._state.spin_s)

    @spin_s.setter
    def spin_s(self, value: float) -> None:
        self._state.spin_s = value

    @property
    def share_cores(self) -> bool:
        return bool(self._state.share_cores)

    @share_cores.setter
    def share_cores(self, value: bool) -> None:
        self._state.share_cores = bool(value)

    def budget(self, running: bool) -> float:
        """Seconds the core may spin before it sleeps."""
        if self.oversubscribed:
            return min(self.spin_s, _spin.OVERSUBSCRIBED_SPIN_S) if self.share_cores else 0.0
        if running and not _spin.host_busy():
            return RUNNING_SPIN_S
        return self.spin_s

    def core_policy(self, running: bool) -> tuple[float, int, float]:
        """(spin seconds, yield mode, sleep seconds before the core hands the wait back)."""
        return self.budget(running), self.yield_mode, CORE_SLEEP_S

    def rounds_yield(self) -> int:
        """The yield mode of multi-round schedules: yield while spinning only on a loaded
        host (on an idle one a yield is a syscall that delays seeing the member arrive)."""
        return self.yield_mode if self.oversubscribed else int(_spin.host_busy())

    def settle(self, running: bool, slept: bool = False) -> None:
        """A wait of the core completed: grow the budget if it ended while spinning, shrink
        it if the core had to sleep (waits for running members teach nothing)."""
        if not running:
            self.spin_s = max(self.spin_s / 2, MIN_SPIN_S) if slept else \
                min(self.spin_s * 2, self.cap)

    def python_spin(self, start: float, running: bool, announced: bool,
                    spun: bool) -> tuple[float, bool]:
        """The pure-Python wait's spin: (spin until, ``extended``), where ``extended`` says
        the spin may no longer be lengthened once for a member found running."""
        if self.oversubscribed:  # spinning takes the core a member needs
            return start, True
        if spun:  # only the once-only extension for a member that announced late is left
            return start, running or not announced
        if running and not _spin.host_busy():
            return start + RUNNING_SPIN_S, True
        return start + self.spin_s, not announced

    def learn(self, blocked: bool) -> None:
        """A pure-Python wait for an idle member ended: as :meth:`settle`, capped at
        ``SPIN_S`` (the budget learns how long idle members take, not copies)."""
        self.spin_s = max(self.spin_s / 2, MIN_SPIN_S) if blocked else \
            min(self.spin_s * 2, SPIN_S)
