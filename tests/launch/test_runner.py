"""The job runner's decisions (launch/runner.py) over workers that end when told to.

The workers here are threads that end with a given status and last output at a given
moment: what the runner sees of a process, an actor, a task or a node's report.
"""

from __future__ import annotations

import threading
import time

from terascale.launch.runner import Worker, restarts, stop_all, watch


class _Timed(Worker):
    """Ends ``after`` seconds from now with ``status`` and ``lines`` (never, if None)."""

    def __init__(self, after: float | None, status: int = 0, lines: tuple[str, ...] = (),
                 rank: int | None = None, echo: bool | None = None) -> None:
        self.status, self.lines, self.rank, self.echo = status, lines, rank, echo
        self.ended = threading.Event()
        self.terminated = False
        if after is not None:
            threading.Timer(after, self.ended.set).start()

    def wait(self) -> int:
        self.ended.wait()
        return self.status

    def tail(self) -> list[bytes]:
        return [ln.encode() for ln in self.lines]

    def secondary(self) -> bool:
        return super().secondary() if self.echo is None else self.echo

    def failed_rank(self) -> int | None:
        return self.rank

    def terminate(self) -> None:
        self.terminated = True
        self.kill()

    def kill(self) -> None:
        if not self.ended.is_set():
            self.status = 137
            self.ended.set()


def test_the_cause_is_blamed_not_the_first_echo_to_end() -> None:
    workers = [_Timed(0.0, 1, ("PeerLost: lost peer rank 2 (connection reset)\n",)),
               _Timed(None),
               _Timed(0.1, 1, ("RuntimeError: disk full\n",))]
    v = watch(workers)
    assert (v.status, v.rank, v.blame) == (1, 2, None)
    stop_all(workers, 1.0, lambda i: workers[i].ended.is_set())
    assert workers[1].terminated and workers[1].status == 137


def test_offset_ranks_are_global() -> None:
    workers = [_Timed(0.0, 1, ("PeerLost: lost peer rank 5 (connection reset)\n",)),
               _Timed(0.1, 3, ("ValueError: bad\n",))]
    v = watch(workers, offset=4)
    assert (v.status, v.rank) == (3, 1)


def test_groups_decide_a_primary_failure_at_once() -> None:
    """Nodes as workers: each reports its verdict; a primary report needs no settling."""
    workers = [_Timed(None), _Timed(0.0, 1, ("RuntimeError: boom\n",), rank=3, echo=False)]
    start = time.monotonic()
    v = watch(workers, settle=5.0, owner=lambda r: r // 2)
    assert (v.status, v.rank, v.blame) == (1, 1, None)
    assert time.monotonic() - start < 2.0
    stop_all(workers, 1.0, lambda i: workers[i].ended.is_set())


def test_groups_blame_a_rank_whose_group_left_early() -> None:
    """Node 0's rank 1 echoes rank 2 of node 1, whose workers all ended with status 0."""
    workers = [_Timed(0.05, 1, ("PeerLost: lost peer rank 2 (connection reset)\n",), rank=1,
                      echo=True),
               _Timed(0.0, 0)]
    v = watch(workers, settle=0.1, owner=lambda r: r // 2)
    assert (v.status, v.rank) == (1, 0)
    assert v.blame is not None and v.blame.ranks == [2]
    assert v.blame.why == ("rank 2 left the job early (it exited with status 0 while rank 1 "
                           "still needed it)")


def test_a_leaver_named_by_the_echoes_is_blamed_whenever_its_exit_was_seen() -> None:
    """On a loaded host the watcher of a rank that left with status 0 may wake after the
    echoes of its leaving ended: the rank they name is blamed all the same."""
    echo = ("PeerLost: rank 0: allreduce #4 lost peer rank 2 (connection closed)\n",)
    workers = [_Timed(0.0, 1, echo), _Timed(0.0, 1, echo), _Timed(0.1, 0)]
    v = watch(workers, settle=0.05)
    assert v.blame is not None and v.blame.ranks == [2], v
    assert v.blame.why.startswith("rank 2 left the job early")


def test_groups_keep_an_echo_whose_cause_failed_silently() -> None:
    workers = [_Timed(0.0, 1, ("PeerLost: lost peer rank 2 (connection reset)\n",), rank=1,
                      echo=True),
               _Timed(0.05, 1, ("PeerLost: lost peer rank 1 (connection reset)\n",), rank=2,
                      echo=True)]
    v = watch(workers, settle=0.1, owner=lambda r: r // 2)
    assert (v.status, v.rank, v.blame) == (1, 0, None)


def test_restarts_stop_at_the_first_success() -> None:
    heard: list[tuple[int, int, bool]] = []
    last = restarts(3, lambda n: n, lambda r: r == 1, lambda n, r, again: heard.append(
        (n, r, again)))
    assert last == 1 and heard == [(0, 0, True)]
    assert restarts(1, lambda n: n + 10, lambda r: False) == 11
