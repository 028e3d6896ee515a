"""Background threads yield the core to the thread on the critical path.

A learner's process runs helper threads beside the learner: the prefetcher that reads and
decodes the next block (:func:`terascale.linear._io._blocks.prefetch`), the text parser's
threads and the cache writer. They fill the cores the learner leaves, and the learner
waits for them only when their queue runs dry. But with more runnable threads than cores
the learner also waits for its *peers*: at every barrier of a collective it sleeps (the
shared-memory futex wait, :mod:`terascale.transport._spin`) and its peer's arrival wakes
it. Linux's EEVDF scheduler (6.6 on) does not preempt a running task for a woken one of
equal weight before that task's slice ends, so on a core held by a helper thread each
wake-up cost up to a slice, at every barrier of every collective.

The lower a helper's priority, the sooner the woken learner gets the core back; so the
helpers run at nice ``BACKGROUND_NICE`` (19), where a barrier's wake-up waits about as
little as with no helper at all. On an idle host they keep a core each; where they share a
core with the learner, the learner runs whenever it can and they take what it leaves,
which is the same work in the same order (a queue between them), so results do not change
by a bit. ``SCHED_IDLE`` is
not used: a ``SCHED_IDLE`` thread may starve for as long as any other task on the host is
runnable, and the learner then waits for a block that never comes.

The nice is per thread (Linux's ``setpriority`` on a thread id) and only ever raised,
which needs no privilege; on a thread that is not ours to lower (another platform, where
``setpriority`` takes a whole process) nothing is done. ``TERASCALE_BACKGROUND_NICE=0``
turns it off, to compare; a value that is not an integer from 0 to 19 is reported once
(a warning naming the variable) and the default used: a helper thread is no place to raise.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

from ._env import read_setting

__all__ = ["BACKGROUND_NICE", "background"]

BACKGROUND_NICE = 19  # the helpers' nice (19: the lowest priority a thread can have)


_warned: set[str] = set()


def _nice() -> int:
    text = read_setting("TERASCALE_BACKGROUND_NICE")
    if text is None:
        return BACKGROUND_NICE
    try:
        value = int(text)
    except ValueError:
        value = -1
    if 0 <= value <= 19:
        return value
    if text not in _warned:
        _warned.add(text)
        warnings.warn(f"TERASCALE_BACKGROUND_NICE must be an integer from 0 to 19, not "
                      f"{text!r}: the helper threads run at nice {BACKGROUND_NICE}",
                      RuntimeWarning, stacklevel=3)
    return BACKGROUND_NICE


def background() -> None:
    """Lower the calling thread's priority to ``BACKGROUND_NICE`` (never raises it, never
    fails: a priority is a hint). Call it first thing in a helper thread."""
    if not sys.platform.startswith("linux") or threading.current_thread() is \
            threading.main_thread():
        return  # elsewhere setpriority would take the whole process
    nice = _nice()
    try:
        tid = threading.get_native_id()
        if os.getpriority(os.PRIO_PROCESS, tid) < nice:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
    except (OSError, AttributeError):
        pass
