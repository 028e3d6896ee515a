"""futex(2) through ctypes: block on a word of shared memory until another process changes it.

Linux x86_64 and aarch64; elsewhere a wait is a short sleep (correct, only slower).
"""

from __future__ import annotations

import ctypes
import platform
import time

__all__ = ["Timespec", "futex_wait", "futex_wake"]

# futex(2) on the low 32 bits of a member's epoch word: a waiter blocks until the member
# arrives (or BLOCK_S passes) instead of burning the core the member may need.
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine(), 0)
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def futex_wait(addr: int, expected: int, timeout: Timespec) -> None:
    """Block while the u32 at ``addr`` holds ``expected``, at most ``timeout``."""
    if _SYS_FUTEX:
        _syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAIT,
                 ctypes.c_uint32(expected & 0xFFFFFFFF), ctypes.byref(timeout), None, 0)
    else:
        time.sleep(timeout.tv_nsec * 1e-9)


def futex_wake(addr: int) -> None:
    """Wake every waiter on the u32 at ``addr``."""
    if _SYS_FUTEX:
        _syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)
