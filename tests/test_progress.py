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


class _Buffer:
    """Stands for a collective's buffer (a torch tensor's numpy view in practice)."""


def test_the_thread_lets_go_of_a_collectives_buffers_before_it_is_done() -> None:
    # A tensor freed on this thread during interpreter finalization aborts the process.
    import gc
    import weakref

    p = Progress()
    buf = _Buffer()
    seen = weakref.ref(buf)
    h = p.submit(Handle("test"), lambda b=buf: b)  # the body holds the buffer
    del buf
    assert h.wait(10) is seen()
    h._result = None  # the caller drops the result; only the thread could still hold it
    gc.collect()
    assert seen() is None
    p.close()


def test_close_joins_the_thread() -> None:
    p = Progress()
    p.submit(Handle("test"), lambda: None).wait(10)
    thread = p._thread
    assert thread is not None and thread.is_alive()
    p.close()
    assert not thread.is_alive()
