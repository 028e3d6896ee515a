"""Workers forked from the launcher (``LaunchOptions.fork``) instead of started by ``exec``.

A worker started as a new program pays the interpreter's start, its imports and, for the
linear learner, numba's set-up and the loading of its compiled kernels again: about 0.7 s
of CPU per worker on two cores, before it reads a line, and more than the whole pass of a
short job. A launcher that has already imported and loaded all that forks its workers
instead; each starts with the launcher's memory (shared copy-on-write) and runs the
worker's function directly.

What a fork inherits, and what is done about it, in the child:

* threads: only the forking thread goes on, and every lock another thread held at that
  instant stays held in the child for good. So a worker is forked only while the
  launcher runs no other Python thread (``launcher.run_group`` checks, on a restart once
  the previous attempt's threads have ended, and otherwise runs the command): every
  thread of an attempt -- the rendezvous server's, the output pumps, the watchers --
  starts after its last worker is forked; the workers that reach the rendezvous first
  wait in its listening socket's backlog until then. (A
  server thread serving the first worker while the next one is forked may be importing
  a module on its behalf, the cipher's on a first connection: that worker would wait
  forever on the module's import lock, and its rank never arrive.) numba's parallel
  pool is never started in the launcher (its kernels run one thread there); OpenBLAS
  stops its pool around ``fork`` itself (its ``pthread_atfork`` handlers).
* descriptors: everything above 2 is closed (the rendezvous's listening socket, the
  watchdog's pipe, other workers' pipes), then standard output and error are this
  worker's pipes, with fresh ``sys.stdout``/``sys.stderr`` written through (no buffer or
  lock of the launcher's is used, nothing it left unflushed is written twice).
* signals: SIGINT and SIGTERM are Python's defaults again (the launcher catches them).
* environment: the worker's own (``os.environ`` replaced, as ``exec`` would give it).
* exit handlers: the launcher's are dropped (they remove its temporary files, which
  its other workers and its own end still read); those the worker registers run at its
  end, as at a program's exit.
* an exception out of the function goes to ``sys.excepthook``, as an uncaught one would
  (a joined worker's hook tells its peers first, ``terascale.init``).
* the end: ``os._exit`` with the function's status, after flushing: no object the
  launcher owns is finalized in a worker, and none of its descriptors closed twice.

The worker is the launcher's child either way: the launcher waits for it, stops its
process group and blames its rank exactly as for an ``exec``'d one.
"""

from __future__ import annotations

import atexit
import io
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import IO

__all__ = ["Forked", "fork_worker"]


class Forked:
    """The launcher's handle of a forked worker: what :class:`subprocess.Popen` gives of
    an ``exec``'d one (``pid``, ``stdout``, ``stderr``, ``poll``, ``wait``)."""

    def __init__(self, pid: int, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.pid, self.stdout, self.stderr = pid, stdout, stderr
        self.returncode: int | None = None
        self._reap = threading.Lock()  # one thread waits in waitpid; poll() does not block

    def _status(self, flags: int) -> int | None:
        pid, status = os.waitpid(self.pid, flags)
        if pid == 0:
            return None
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is not None or not self._reap.acquire(blocking=False):
            return self.returncode  # (a waiter holds the lock: it sets returncode)
        try:
            return self.returncode if self.returncode is not None else \
                self._status(os.WNOHANG)
        finally:
            self._reap.release()

    def wait(self) -> int:
        with self._reap:
            if self.returncode is None:
                self._status(0)
        assert self.returncode is not None
        return self.returncode


def fork_worker(run: Callable[[], int], env: dict[str, str], *, session: bool,
                preexec: Callable[[], None] | None) -> Forked:
    """Fork a worker that runs ``run()`` with environment ``env`` and exits with its
    status (an exception: its traceback on standard error, status 1).

    ``session``: the worker leads a session of its own (``start_new_session``);
    ``preexec``: run in the worker first (``preexec_fn``: dying with the launcher, a
    process group, CPU binding)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # (else the worker would write it again)
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # (closed, or None: no stream)
            pass
    try:
        pid = os.fork()
    except OSError:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    if pid == 0:  # the worker
        code = 1
        try:
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.closerange(3, _max_fd())
            if session:
                os.setsid()
            if preexec is not None:
                preexec()
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            atexit._clear()
            os.environ.clear()
            os.environ.update(env)
            sys.stdout = _stream(1)
            sys.stderr = _stream(2)
            code = _status(run)
            atexit._run_exitfuncs()
        except BaseException:
            _report()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    return Forked(pid, os.fdopen(out_r, "rb", buffering=0), os.fdopen(err_r, "rb", buffering=0))


def _status(run: Callable[[], int]) -> int:
    """``run()``'s exit status, as a program's: its return value, ``SystemExit``'s code,
    or 1 after an exception (reported as an uncaught one)."""
    try:
        code = run()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException:
        _report()
        return 1
    return code & 0xFF if isinstance(code, int) else 1


def _report() -> None:
    try:
        sys.excepthook(*sys.exc_info())
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass


def _stream(fd: int) -> io.TextIOWrapper:
    """A text stream on ``fd`` written through at once (``PYTHONUNBUFFERED``'s)."""
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                            errors="backslashreplace", line_buffering=True,
                            write_through=True)


def _max_fd() -> int:
    try:
        return max(int(n) for n in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return os.sysconf("SC_OPEN_MAX")
