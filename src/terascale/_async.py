"""Background progress for asynchronous collectives.

One thread per communicator runs queued collectives strictly in submission order (which is
program order, the same on every rank), so ``allreduce_async`` can overlap with the
caller's computation while every rank still runs the same sequence of collectives.

The thread is joined when its communicator closes and, at the latest, at interpreter exit
(``atexit``, before finalization), and it keeps no reference to a collective's buffers once
that collective is done. Freeing a torch tensor gives up and retakes the GIL inside torch's
C++; a daemon thread doing so while the interpreter finalizes is ended mid-call by CPython,
and the unwind aborts the process ("terminate called without an active exception"), as a
job that closes right after an asynchronous allreduce of a tensor's numpy view otherwise
would now and then.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ._errors import PeerTimeout

__all__ = ["Handle", "Progress", "close_at_exit"]


class Handle:
    """The future result of an asynchronous collective; ``wait()`` returns it.

    Parameters
    ----------
    what
        The collective's description, used in the timeout's message (e.g.
        ``"allreduce(float32[1000],sum)"``).
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._event = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        """True once the collective finished (successfully or not)."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the collective finished; return its result or raise its error.

        Parameters
        ----------
        timeout
            Seconds to wait at most before raising :class:`~terascale.PeerTimeout` (default None:
            until the collective's own deadline).
        """
        if not self._event.wait(timeout):
            raise PeerTimeout(f"{self.what}: not finished after waiting {timeout:g} s")
        if self._error is not None:
            raise self._error
        return self._result

    def _finish(self, result: Any = None, error: BaseException | None = None) -> None:
        self._result, self._error = result, error
        self._event.set()


_AT_EXIT: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def close_at_exit(owner: Any, timeout: float) -> None:
    """Call ``owner.close(timeout=timeout)`` at interpreter exit, before finalization (see
    the module doc), unless ``owner`` is gone by then: the registry does not keep it."""
    _AT_EXIT[owner] = timeout


@atexit.register
def _close_all() -> None:
    for owner, timeout in reversed(list(_AT_EXIT.items())):  # newest first: a process group
        owner.close(timeout=timeout)                        # before the communicator under it


class Progress:
    """A FIFO of collectives run by one daemon thread; ``drain()`` waits until it is empty."""

    def __init__(self) -> None:
        self._queue: deque[tuple[Handle, Callable[[], Any]]] = deque()
        self._cv = threading.Condition()
        self._busy = False
        self._thread: threading.Thread | None = None
        self._closed = False
        self.exec_lock = threading.Lock()  # held while any collective moves data
        close_at_exit(self, 2.0)  # briefly: a rank exiting on an error must not wait out a
                                  # collective's deadline

    def submit(self, handle: Handle, body: Callable[[], Any]) -> Handle:
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="terascale-progress")
                self._thread.start()
            self._queue.append((handle, body))
            self._cv.notify_all()
        return handle

    def idle(self) -> bool:
        """Nothing queued or running. Under the lock: read without it, the two fields can
        be seen between the thread's ``popleft`` and its ``_busy = True`` (queue empty, not
        busy), and a blocking collective would then run before the queued one it follows.

        Before the first :meth:`submit` the thread does not exist and nothing was ever
        queued: idle without the lock (a blocking collective's per-call fast path asks
        this on every call, and callers that submit hold the same ordering lock as it)."""
        if self._thread is None:
            return True
        with self._cv:
            return not self._queue and not self._busy

    def drain(self, deadline: float | None = None) -> None:
        with self._cv:
            while self._queue or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise PeerTimeout("asynchronous collectives still running at the deadline")
                self._cv.wait(left if left is None else min(left, 1.0))

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread after what is queued (each collective ends by its deadline) and
        join it, unless called from that thread."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue:
                    return
                self._busy = True  # before the pop: idle() never sees neither
                handle, body = self._queue.popleft()
            result: Any = None
            error: BaseException | None = None
            try:
                with self.exec_lock:
                    result = body()
            except BaseException as e:  # delivered to whoever waits on the handle
                error = e
            del body  # its buffers are the caller's once the handle is done (module doc)
            handle._finish(result, error)
            del handle, result, error
            with self._cv:
                self._busy = False
                self._cv.notify_all()
