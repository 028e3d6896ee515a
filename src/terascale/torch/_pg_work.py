"""The process group's work objects, and the threads that complete the asynchronous ones.

torch hands every collective back as a work object whose future DDP's reducer, the comm hooks
and ``Work.wait()`` read. Two rules follow from how torch reads it:

* **A failure is the future's error, not its value.** Python's ``Future.set_exception``
  stores the exception as the future's *value* (a Python object) and raises it only when
  Python unwraps it; C++ readers never unwrap: the reducer takes that value for the bucket's
  tensors (``parseCppCommHookResult``) and reads past an empty list -- a segfault on every
  surviving rank. A collective's future here is the child of a private one (``then``): the
  child's callback raises the collective's error, which torch stores as the child's C++
  error, so ``wait()``/``value()`` raise it in Python and in C++ alike. DDP's ``backward()``
  and every hook then see the collective's own error (``PeerLost``, ``PeerTimeout``...,
  naming the rank, the peer and the operation).
* **Completing a future runs user code.** Callbacks chained with ``then`` run in the thread
  that completes the future, and a comm hook such as PowerSGD starts another collective in
  its callback and waits on it there. So no single thread both completes futures and is
  needed to complete the next one: :class:`Completer` keeps a pool that always has a free
  thread for the next collective -- a thread held by a callback is replaced, an idle one
  ends after a while. Collectives still start in the order they are called (the
  communicator numbers them under its lock, in the calling thread), the same on every rank;
  only their completion runs in parallel, and each wait ends by its collective's deadline.

The threads are stopped and joined when the group shuts down and, at the latest, when the
interpreter exits (before finalization): a thread still inside torch's ``Future.set_result``
while the interpreter finalizes is ended mid-call by CPython, and the unwind through torch's
C++ aborts the process ("terminate called without an active exception").
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from torch.futures import Future

from .._async import close_at_exit

__all__ = ["Completer", "Work", "completed", "eager_under_compile", "failed", "wait_seconds"]

_IDLE_S = 30.0  # a completion thread with nothing to do for this long ends


class _Failure:
    """A collective's error, carried as the private future's value to the child's callback."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _unwrap(source: Future[Any]) -> Any:
    value = source.value()
    if isinstance(value, _Failure):
        # torch stores this as the child future's C++ error, as text ("Got the following
        # error when running the callback: PeerLost: rank 0: ..." plus the traceback): a
        # copy without the original traceback keeps that text to the message.
        try:
            error = copy.copy(value.error).with_traceback(None)
        except Exception:  # noqa: BLE001 (an exception type that does not copy)
            error = value.error
        raise error
    return value


def _pair() -> tuple[Future[Any], Future[Any]]:
    """(private future to complete, the future torch and the user see)."""
    source: Future[Any] = Future()
    return source, source.then(_unwrap)


def wait_seconds(timeout: Any) -> float | None:
    """A ``wait(timeout=)`` argument in seconds: torch passes a ``timedelta``; a number is
    taken as seconds; None, zero or less means no timeout of the caller's own (the group's
    deadline)."""
    seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
    return float(seconds) if isinstance(seconds, (int, float)) and seconds > 0 else None


class Work(dist._Work):
    """A collective's work object: ``wait()`` raises the collective's own error (torch's
    future-wrapping work would report success; the future's error is that error as text)."""

    def __init__(self, fut: Future[Any], source: Future[Any] | None = None,
                 rank: int | None = None) -> None:
        super().__init__()
        self._fut = fut
        self._source = source
        self._rank = rank

    def wait(self, timeout: Any = None) -> bool:
        """Wait for the collective; its error raised with its own type. ``timeout`` (a
        ``timedelta``, as torch passes it) stops the wait sooner than the group's deadline
        with a PeerTimeout that is also a ``RuntimeError`` (what gloo's ``wait(timeout)``
        raises); the collective itself goes on and ends by its deadline."""
        seconds = wait_seconds(timeout)
        if seconds is not None and not self._fut.done():
            done = threading.Event()
            self._fut.add_done_callback(lambda _: done.set())
            if not done.wait(seconds):
                from ._pg_p2p import TorchTimeout  # (it imports this module)

                who = f"rank {self._rank}" if self._rank is not None else "this rank"
                raise TorchTimeout(f"{who}: work.wait(timeout={seconds:g} s) ran out before "
                                  f"the collective completed (it goes on, and ends by the "
                                  f"group's deadline)", rank=self._rank, operation="wait")
        try:
            self._fut.wait()  # every collective has a deadline: this wait ends by it
        except Exception:
            value = self._source.value() if self._source is not None else None
            if isinstance(value, _Failure):
                raise value.error from None  # PeerLost, PeerTimeout... with its type
            raise
        return True

    def get_future(self) -> Future[Any]:
        return self._fut

    def is_completed(self) -> bool:
        return self._fut.done()

    def is_success(self) -> bool:
        if not self._fut.done():
            return False
        try:
            self._fut.value()
        except Exception:  # noqa: BLE001 (any error means: not a success)
            return False
        return True

    def exception(self) -> Any:
        if not self._fut.done():
            return None
        try:
            self._fut.value()
        except Exception as e:  # noqa: BLE001
            return e
        return None


def completed(value: Any) -> Work:
    """A work object that is already done, with ``value`` (the synchronous collectives)."""
    fut: Future[Any] = Future()
    fut.set_result(value)
    return Work(fut)


def failed(error: BaseException) -> Work:
    """A work object that has already failed with ``error`` (as torch reads a failure)."""
    source, fut = _pair()
    source.set_result(_Failure(error))
    return Work(fut, source)


class Completer:
    """Waits the communicator's handles and completes the torch futures, from a pool of
    threads of which one is always free for the next collective (see the module doc)."""

    def __init__(self, rank: int, idle_s: float = _IDLE_S) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._free = 0  # threads waiting for work that no queued item has claimed
        self._rank = rank
        self._idle_s = idle_s
        close_at_exit(self, 10.0)

    @property
    def threads(self) -> int:
        """How many completion threads are alive (for tests and tuning)."""
        with self._lock:
            return len(self._threads)

    def close(self, timeout: float = 10.0) -> None:
        """Stop the threads after the work queued so far (each item ends by its collective's
        deadline) and join them, ``timeout`` in all; a later :meth:`add` starts anew."""
        with self._lock:
            threads, self._threads = list(self._threads), set()
            self._free = 0
            for _ in threads:
                self._queue.put(None)
        end = time.monotonic() + timeout
        for t in threads:
            if t is not threading.current_thread():
                t.join(max(0.0, end - time.monotonic()))

    def work(self, handles: list[Any], finish: Callable[[list[Any]], Any]) -> Work:
        """The work object of ``finish([h.wait() for h in handles])`` (see :meth:`add`)."""
        source, fut = _pair()
        self._submit(handles, finish, source)
        return Work(fut, source, self._rank)

    def add(self, handles: list[Any], finish: Callable[[list[Any]], Any]) -> Future[Any]:
        """The future of ``finish([h.wait() for h in handles])``, completed by a pool thread;
        its error is the first handle's error (or ``finish``'s)."""
        source, fut = _pair()
        self._submit(handles, finish, source)
        return fut

    def _submit(self, handles: list[Any], finish: Callable[[list[Any]], Any],
                source: Future[Any]) -> None:
        with self._lock:
            if self._free > 0:
                self._free -= 1
            else:
                t = threading.Thread(target=self._loop, daemon=True,
                                     name=f"terascale-pg-{self._rank}")
                self._threads.add(t)
                t.start()
            self._queue.put((handles, finish, source))

    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            try:
                item = self._queue.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._free > 0 and me in self._threads:  # not needed: end
                        self._free -= 1
                        self._threads.discard(me)
                        return
                continue
            if item is None:
                return
            handles, finish, source = item
            try:
                # Each handle finishes by its collective's deadline: no wait here is unbounded.
                value = finish([h.wait() for h in handles])
            except BaseException as e:  # the collective's own error, naming rank and peer
                value = _Failure(e)
            source.set_result(value)  # runs the callbacks chained on the work's future
            with self._lock:
                if me not in self._threads:  # closed meanwhile: a None is queued for us
                    continue
                self._free += 1


_IDENTITY = ("get", "set", "shutdown", "abort", "size", "rank", "name")


def eager_under_compile(cls: type) -> type:
    """Run ``cls``'s collectives eagerly when ``torch.compile`` meets them (a graph break).

    Dynamo treats a process group as an opaque object: tracing into a Python group's
    method (DDP broadcasting buffers in ``forward``) fails on its first attribute ("Member
    '_comm' is not registered for this opaque object type"). C++ groups are never traced
    into; this makes a Python one the same: each collective runs as called.
    """
    import torch

    for name, fn in list(vars(cls).items()):
        if (callable(fn) and not name.startswith("__") and not name.startswith(_IDENTITY)
                and not isinstance(fn, (staticmethod, classmethod, property))):
            setattr(cls, name, torch.compiler.disable(fn, recursive=True))
    return cls
