"""terascale._malloc: freed blocks are reused by the next allocation, not mapped afresh."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

_CHILD = r"""
import resource, sys
import numpy as np
from terascale._malloc import keep_freed_memory

if sys.argv[1] == "tune":
    print(keep_freed_memory(), keep_freed_memory())
a = np.ones(1 << 20, np.float32)
del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    a = np.ones(1 << 20, np.float32)  # 4 MiB, a parsed block's size
    del a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="mallopt thresholds are glibc's")


def _without_allocator_settings() -> dict[str, str]:
    """This process's environment less the user's allocator settings."""
    return {k: v for k, v in os.environ.items()
            if k not in ("TERASCALE_MALLOC", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                         "MALLOC_ARENA_MAX")}


def _child(how: str, **env: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _CHILD, how],
                         env={**_without_allocator_settings(), **env},
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.split()


@glibc
def test_a_freed_block_is_reused_without_page_faults():
    untuned = int(_child("none")[-1])
    first, again, faults = _child("tune")
    assert (first, again) == ("True", "False")  # set once per process
    assert untuned > 100  # glibc's defaults map 4 MiB afresh: a fault per page touched
    assert int(faults) < 20


@glibc
@pytest.mark.parametrize("env", [{"TERASCALE_MALLOC": "system"},
                                 {"MALLOC_TRIM_THRESHOLD_": "131072"}])
def test_the_users_allocator_settings_are_left_alone(env):
    assert _child("tune", **env)[:2] == ["False", "False"]


_HAND_BACK = r"""
import numpy as np
from terascale._malloc import hand_back_freed_memory, keep_freed_memory

def rss():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS")) // 1024

kept_set = keep_freed_memory()
blocks = [np.ones(1 << 20, np.float32) for _ in range(24)]  # 96 MiB of 4 MiB blocks
blocks.insert(0, np.ones(16, np.float32))  # below them, something still held
kept = [blocks[0]] + [b for b in blocks[1::7]]
del blocks
held = rss()
hand_back_freed_memory()
print(kept_set, held, rss())
"""


@glibc
def test_the_kept_blocks_go_back_at_a_phase_change():
    out = subprocess.run([sys.executable, "-c", _HAND_BACK], capture_output=True, text=True,
                         timeout=60, check=True, env=_without_allocator_settings())
    kept_set, held, after = out.stdout.split()
    assert kept_set == "True"  # the thresholds were raised: freed blocks stay in the heap
    assert int(held) - int(after) > 50, (held, after)  # most of the ~80 MiB freed goes back


_THREADS = r"""
import sys, threading
import numpy as np
from terascale._malloc import hand_back_freed_memory, keep_freed_memory

def rss():
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("RssAnon")) // 1024

if sys.argv[1] == "tune":
    keep_freed_memory()
base = rss()

def parse():  # a parser thread: blocks allocated in turn, the last ones freed at the end
    blocks = [np.ones(1 << 20, np.float32) for _ in range(6)]  # 24 MiB of 4 MiB blocks
    del blocks

threads = [threading.Thread(target=parse) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
hand_back_freed_memory()
print(rss() - base)
"""


@glibc
def test_blocks_freed_by_other_threads_go_back_at_a_phase_change():
    # with an arena per thread the raised trim threshold kept each thread heap's top (the
    # blocks it freed last) resident, and malloc_trim does not trim a thread heap's top
    out = subprocess.run([sys.executable, "-c", _THREADS, "tune"], capture_output=True,
                         text=True, timeout=60, check=True, env=_without_allocator_settings())
    assert int(out.stdout) < 8, out.stdout  # of the 48 MiB the two threads held
