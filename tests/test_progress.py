"""The progress thread's FIFO: a blocking collective must never overtake a queued one."""

from __future__ import annotations

import threading
from collections import deque

from terascale._async import Handle, Progress


class _WatchedQueue(deque):
    """A deque that records ``progress.idle()`` right after each pop by the thread."""

    def __init__(self, progress: Progress) -> None:
        super().__init__()
        self.progress = progress
        self.seen: list[bool] = []

    def popleft(self):  # type: ignore[override]
        item = super().popleft()
        self.seen.append(self.progress.idle())
        return item


def test_progress_is_never_idle_between_taking_a_collective_and_running_it():
    # Seen idle there, a blocking collective skipped drain() and ran before the queued one
    # (rank 0 still in allreduce #643 while rank 1 had sent allgather #644).
    p = Progress()
    q = _WatchedQueue(p)
    p._queue = q
    done = threading.Event()
    h = p.submit(Handle("x"), done.set)
    h.wait(10)
    p.drain(None)
    assert done.is_set() and q.seen == [False]
    assert p.idle()
    p.close()
