"""The shared-memory segment's socket admits like a TCP port: another user's connection is
closed unread (SO_PEERCRED), every client is served concurrently with its own deadline, so
a squatter that connects first and dribbles bytes stops no member and no job."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from terascale.transport import _memfd
from terascale.transport._memfd import HAVE_MEMFD, SegmentOffer, peer_credentials, receive_segment

HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(not HAVE_MEMFD, reason="no memfd_create here")
as_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run a process of another user")

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
DRIBBLE = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(bytes.fromhex(sys.argv[1]))
print("in", flush=True)
try:
    for _ in range(120):
        s.send(b"k")
        time.sleep(0.5)
except OSError:
    print("refused", flush=True)
"""


def _address(offer: SegmentOffer) -> bytes:
    return b"\0terascale-seg-" + offer.note[8:24].hex().encode()


def _squat(offer: SegmentOffer, user: list[str]) -> subprocess.Popen:
    p = subprocess.Popen([*user, sys.executable, "-c", DRIBBLE, _address(offer).hex()],
                         stdout=subprocess.PIPE, text=True, cwd="/")
    assert p.stdout is not None and p.stdout.readline() == "in\n"  # queued ahead of members
    return p


def _member_gets_it(offer: SegmentOffer) -> None:
    """Within 5 s (a loaded machine): served inline, a dribbler held a member for 16 s."""
    fd, size = receive_segment(offer.note, time.monotonic() + 5.0)
    os.close(fd)
    assert size == 4096


@as_nobody
def test_another_users_squatter_is_refused_at_once() -> None:
    offer = SegmentOffer(4096, "terascale-test", 1)
    squatter = _squat(offer, NOBODY)
    try:
        _member_gets_it(offer)
        assert squatter.stdout is not None and squatter.stdout.readline() == "refused\n"
        assert offer.drops == 1
    finally:
        squatter.kill()
        squatter.wait()
        offer.close()


def test_a_dribbler_of_this_user_delays_no_member() -> None:
    offer = SegmentOffer(4096, "terascale-test", 2)
    squatter = _squat(offer, [])
    try:
        # two members, one after the other, while the dribbler's connection is still open
        _member_gets_it(offer)
        _member_gets_it(offer)
    finally:
        squatter.kill()
        squatter.wait()
        offer.close()


def test_one_process_holding_many_connections_evicts_its_own_oldest(monkeypatch) -> None:
    monkeypatch.setattr(_memfd, "_CLIENT_S", 60.0)  # evicted, not timed out, however loaded
    offer = SegmentOffer(4096, "terascale-test", 1)
    idle = []
    try:
        for _ in range(8):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(_address(offer))
            assert peer_credentials(s) == (os.getpid(), os.getuid())
            idle.append(s)
        deadline = time.monotonic() + 5
        while offer.drops < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert offer.drops == 4  # 8 pending of one process, 4 allowed: the 4 oldest shut
        assert [s.recv(1) for s in idle[:4]] == [b""] * 4
        _member_gets_it(offer)  # the newest is served: eviction takes the oldest
    finally:
        for s in idle:
            s.close()
        offer.close()


@as_nobody
def test_a_squatter_of_another_user_does_not_stop_a_job(python: str) -> None:
    res = subprocess.run([python, "-m", "terascale", "run", "-n", "2", "--timeout", "8",
                          python, str(HERE / "_squat_job.py")], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    lines = sorted(ln.split("] ", 1)[1] for ln in res.stdout.splitlines())
    assert lines[0].startswith("rank 0 sum 3 squatters ") and lines[1] == "rank 1 sum 3 squatters 0"
    assert int(lines[0].rsplit(" ", 1)[1]) >= 1, lines  # the segment was squatted
