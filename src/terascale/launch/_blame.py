"""Which rank caused a failure, from what the survivors said and what the launcher sees.

A crash is easy to blame: the crashed worker exits first and the others say "lost peer" or
"aborted because rank N". A *stall* is not: the stalled rank (stopped with SIGSTOP, stuck
in a loop that never reaches the next collective, or cut off from the network) exits
last or never, and the ranks that exit first are the ones whose deadline passed -- each
naming the peer it happened to be waiting on, which in a ring or a tree is often a healthy
rank waiting on the stalled one. The launcher therefore combines the reports:

1. a worker still there whose process is stopped (``T`` in ``/proc/PID/stat``) is the cause;
2. else a worker still running that some timed-out rank was waiting for;
3. else (every timed-out rank exited and no report is a crash) the workers still running
   after the others gave up: nobody heard from them;
4. else, when every worker exited on a timeout, the rank named by most of them (the one cut
   off from the others: everybody was waiting on it), if there is a single such rank.

Otherwise the first primary failure stands (the launcher's old rule).

A failure is *secondary* (an echo) when its last error names another rank as the cause:
"aborted because rank N", "lost peer rank N", or another rank's error relayed as its own
("rank 1: rank 0: checkpoint save: cannot write ...": rank 0's full disk, told to every
rank). :func:`echoed` reads the rank it names. When only echoes exited, the launcher waits a
moment for the rank they name; a rank they name that had already exited with status 0 *left
the job early* (it ran fewer collectives than the others) and is the one blamed
(:func:`blame_leaver`), on one node and across nodes alike.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

__all__ = ["Blame", "blame_leaver", "blame_stall", "cause_line", "echoed", "is_stopped",
           "is_timeout", "waited_for"]

# "... timed out after 5.0 s waiting for rank 1 (receive), rank 3 (rank 1 of this
# communicator) (send)" and the shared-memory "... waiting for rank 2 (shared memory)"
_WAIT = re.compile(r"timed out after [\d.]+ s waiting for (.*)")
_RANK = re.compile(r"(?<!\()rank (\d+)")
# what an echo says: the cause is another rank
_ECHO = re.compile(rb"aborted because rank (\d+)|lost peer rank (\d+)|\brank (\d+): rank (\d+):")


def _text(tail: Iterable[bytes]) -> str:
    return b"".join(tail).decode(errors="replace")


def is_timeout(tail: Iterable[bytes]) -> bool:
    """The worker's last error is a timeout (it waited for a peer until its deadline)."""
    return _WAIT.search(_text(tail)) is not None


def waited_for(tail: Iterable[bytes]) -> set[int]:
    """Ranks a timed-out worker was waiting for, from its last error message."""
    found: set[int] = set()
    for m in _WAIT.finditer(_text(tail)):
        found.update(int(r) for r in _RANK.findall(m.group(1)))
    return found


def echoed(tail: Iterable[bytes]) -> int | None:
    """The rank a failure merely echoes (its last error names that rank as the cause), or
    None for a failure of its own. Only the last traceback counts (from its last
    ``Traceback`` line, or the whole tail when that scrolled out): torch prints the stack of
    the thread that completed a failed work after the error, one per chained callback (a
    comm hook's), so the error line can be dozens of lines up. The last mention first.
    """
    lines = list(tail)
    starts = [i for i, ln in enumerate(lines) if b"Traceback (most recent call last)" in ln]
    last = b"".join(lines[starts[-1]:] if starts else lines)
    found = None
    for m in _ECHO.finditer(last):
        if m.group(1) or m.group(2):
            found = int(m.group(1) or m.group(2))
        elif m.group(3) != m.group(4):  # "rank 1: rank 0: ...": rank 0's error, relayed
            found = int(m.group(4))
    return found


def blame_leaver(echoes: Mapping[int, list[bytes]], left: Iterable[int]) -> Blame | None:
    """Blame for echoes with no failure of their own behind them: the rank they name among
    ``left`` (ranks that exited with status 0 before the first failure, earliest first), or
    else the earliest of ``left``; None when no rank left early.

    ``echoes`` maps each failed rank (first failure first) to its last output lines.
    """
    left = list(left)
    if not left:
        return None
    named = [echoed(tail) for tail in echoes.values()]
    leaver = next((r for r in named if r in left), left[0])
    waiter = next((r for r, n in zip(echoes, named) if n == leaver), next(iter(echoes)))
    return Blame([leaver], f"rank {leaver} left the job early (it exited with status 0 while "
                          f"rank {waiter} still needed it)")


def is_stopped(pid: int) -> bool:
    """The process is stopped (SIGSTOP, SIGTSTP) or traced: it cannot run on its own."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in (b"T", b"t")


class Blame:
    """The rank(s) a stall is blamed on and the sentence saying why."""

    def __init__(self, ranks: list[int], why: str) -> None:
        self.ranks = ranks
        self.why = why

    def __repr__(self) -> str:
        return f"Blame({self.ranks}, {self.why!r})"


def _names(ranks: Iterable[int]) -> str:
    r = sorted(ranks)
    return f"rank {r[0]}" if len(r) == 1 else "ranks " + ", ".join(map(str, r))


def blame_stall(failed: Mapping[int, list[bytes]], primary: Iterable[int],
                running: Iterable[int], stopped: Iterable[int]) -> Blame | None:
    """Blame for a failure whose primary reports are timeouts, or None to keep the default.

    ``failed`` maps each rank that exited non-zero to its last error lines, ``primary`` the
    ones of those that did not merely echo another rank's failure, ``running`` the ranks
    not exited yet and ``stopped`` those of them that are stopped.
    """
    primary = [r for r in primary if r in failed]
    timeouts = {r: waited_for(failed[r]) for r in primary if is_timeout(failed[r])}
    if not timeouts or len(timeouts) < len(primary):
        return None  # someone crashed or raised something else: that is the cause
    running, stopped = set(running), set(stopped)
    waiters = {r: sorted(w for w, peers in timeouts.items() if r in peers)
               for r in running | set(failed)}

    def why(ranks: set[int], state: str) -> str:
        who = sorted({w for r in ranks for w in waiters.get(r, [])})
        said = f"; {_names(who)} timed out waiting for it" if who else ""
        return f"{_names(ranks)} {state}{said}"

    if stopped:
        return Blame(sorted(stopped), why(stopped, "stalled (its process was stopped)"))
    named = {r for r in running if waiters[r]}
    if named:
        return Blame(sorted(named), why(named, "stalled (still running after its peers "
                                               "gave up)"))
    if running:
        return Blame(sorted(running), why(running, "stalled: nobody heard from it (still "
                                                   "running after its peers gave up)"))
    counts = Counter(p for peers in timeouts.values() for p in peers)
    if counts:
        (top, n), *rest = counts.most_common()
        if not rest or rest[0][1] < n:
            return Blame([top], why({top}, "was cut off (the rank most of the others were "
                                           "waiting on)"))
    return None


# The last line of a Python traceback: "terascale._errors.PeerLost: rank 1: ..."
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Timeout|Lost|Mismatch|"
                     r"Taken|Tampered|Interrupt|Exit)\b)(?::\s*(.*))?$")


def cause_line(tail: Iterable[bytes]) -> str | None:
    """The exception a worker's last output ends with, as ``Name: message`` (one line)."""
    for raw in reversed(list(tail)):
        m = _RAISED.match(raw.decode(errors="replace").rstrip())
        if m:
            return f"{m.group(1)}: {m.group(2)}" if m.group(2) else m.group(1)
    return None
