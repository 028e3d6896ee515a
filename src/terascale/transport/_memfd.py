"""Anonymous shared-memory segments: ``memfd_create`` plus descriptor passing.

A named segment leaks when its creator dies between creating it and the moment every
member has mapped it (only then may the name be unlinked); removing the leftovers needs a
process that outlives the workers, which torchrun, mpirun and srun are not. On Linux a
segment is therefore a ``memfd_create`` file, which has no name at all: it is freed when
the last process holding it (descriptor or mapping) exits, however it exits. Its
descriptor reaches the other members of the host over a Unix socket (``SCM_RIGHTS``) in
the abstract namespace (no file either). The socket's random name and a random key travel
in the creator's note over the job's authenticated TCP link; any local process can see
the name (``/proc/net/unix``) and connect, but only a member knows the key, so only
members are handed the descriptor.

The socket is a listener anyone on the host can reach, so it admits like our TCP ports do:
a connection from another user (``SO_PEERCRED``) is closed at once, unread; every other one
is served in a thread of its own with ``_CLIENT_S`` in all to present the key, and one
process holding more than ``_PER_PROCESS`` pending connections has its oldest shut
(:class:`terascale._admission.Admission`). A squatter that connects first and dribbles
bytes therefore delays no member. A member, in turn, hands the key only to a socket of its
own user. The user is the boundary: a process of the same user could read the segment's
memory through ``/proc`` anyway.

Used by :class:`~terascale.transport.shmgroup.ShmGroup` (``share_anonymous``); without
``memfd_create`` (not Linux) it falls back to named segments in ``/dev/shm``.
"""

from __future__ import annotations

import hmac
import mmap
import os
import secrets
import select
import socket
import struct
import threading
import time

from .._admission import Admission
from .._errors import CollectiveError
from .base import Exchange

__all__ = ["HAVE_MEMFD", "NOTE_BYTES", "SegmentOffer", "peer_credentials", "receive_segment",
           "share_anonymous"]

HAVE_MEMFD = hasattr(os, "memfd_create") and hasattr(socket, "send_fds")
_SIZE = struct.Struct("<Q")
_TOKEN, _KEY = 16, 32
NOTE_BYTES = _SIZE.size + _TOKEN + _KEY if HAVE_MEMFD else _SIZE.size
_ACCEPT_POLL_S = 0.05   # accept()'s limit once select() saw a connection (it may be gone)
_CLIENT_S = 2.0         # a connection must present its key within this, in all
_PER_PROCESS = 4        # pending connections one process may hold; more evict its oldest
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_credentials(conn: socket.socket) -> tuple[int, int]:
    """``(pid, uid)`` of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    pid, uid, _ = _CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                               _CRED.size))
    return pid, uid


def _address(token: bytes) -> bytes:
    return b"\0terascale-seg-" + token.hex().encode()


class SegmentOffer:
    """The creator's side: an anonymous segment of ``size`` bytes, served to ``members``
    other processes of this user that present the key of :attr:`note` (served concurrently,
    until every member has its descriptor or :meth:`close`).

    Raises ``OSError`` when the segment or the socket cannot be made.
    """

    def __init__(self, size: int, label: str, members: int) -> None:
        self.fd = os.memfd_create(label, os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            token, self._key = secrets.token_bytes(_TOKEN), secrets.token_bytes(_KEY)
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._listener.bind(_address(token))
            self._listener.listen(max(members, 1) + 8)
            self._listener.settimeout(_ACCEPT_POLL_S)
        except BaseException:
            os.close(self.fd)
            raise
        self.note = _SIZE.pack(size) + token + self._key
        self._left = members
        self._lock = threading.Lock()
        self._admission = Admission(per_source=_PER_PROCESS)
        self._clients: list[threading.Thread] = []
        self._stop = threading.Event()
        # wakes the serving thread at once when the last member is served or on close()
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._serve, name="terascale-segment",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        me = os.getuid()
        try:
            while not self._stop.is_set() and self._left > 0:
                ready, _, _ = select.select([self._listener, self._wake_r], [], [], 0.5)
                if self._wake_r in ready:
                    self._wake_r.recv(64)
                if self._listener not in ready:
                    continue
                try:
                    conn, _ = self._listener.accept()
                except TimeoutError:  # gone between select and accept
                    continue
                except OSError:
                    if self._stop.is_set():
                        return
                    self._admission.evict(None)  # out of descriptors: shed the oldest
                    time.sleep(0.01)
                    continue
                try:
                    pid, uid = peer_credentials(conn)
                except OSError:
                    conn.close()
                    continue
                if uid != me:  # another user: never read, never served
                    self._admission.dropped("another user", f"uid {uid}")
                    conn.close()
                    continue
                self._admission.admit(conn, f"pid {pid}")
                t = threading.Thread(target=self._hand, args=(conn, pid), daemon=True,
                                     name="terascale-segment-client")
                t.start()
                self._clients = [c for c in self._clients if c.is_alive()] + [t]
        finally:
            self._admission.shut_all()
            for t in self._clients:
                t.join(_CLIENT_S)

    def _hand(self, conn: socket.socket, pid: int) -> None:
        """One connection: the key within ``_CLIENT_S``, then the descriptor."""
        deadline = time.monotonic() + _CLIENT_S
        try:
            key = _recv_exact(conn, _KEY, deadline)
            if key is None or not hmac.compare_digest(key, self._key):
                self._admission.dropped("wrong key", f"pid {pid}")
                return
            self._admission.done(conn)
            conn.settimeout(max(deadline - time.monotonic(), 0.001))
            socket.send_fds(conn, [b"\1"], [self.fd])
            with self._lock:
                self._left -= 1
            if self._left <= 0:
                self._wake()
        except (OSError, TimeoutError):
            # a stranger, or a member that died: the exchange reports the member
            self._admission.dropped("timed out or closed", f"pid {pid}")
        finally:
            self._admission.done(conn)
            conn.close()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"w")
        except OSError:
            pass

    @property
    def drops(self) -> int:
        """Connections dropped so far (other users, wrong keys, too slow)."""
        return self._admission.drops

    def close(self) -> None:
        """Stop serving and drop our descriptor (our mapping keeps the segment alive)."""
        self._stop.set()
        self._wake()
        self._thread.join()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()
        os.close(self.fd)


def receive_segment(note: bytes, deadline: float) -> tuple[int, int]:
    """A member's side: ``(descriptor, size)`` of the creator's segment described by ``note``.

    Raises ``ConnectionError`` when the creator is gone (its socket refuses or closes) and
    ``TimeoutError`` at ``deadline`` (``time.monotonic()``).
    """
    size = _SIZE.unpack_from(note)[0]
    token, key = note[_SIZE.size: _SIZE.size + _TOKEN], note[_SIZE.size + _TOKEN:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(max(deadline - time.monotonic(), 0.001))
        s.connect(_address(bytes(token)))
        _, uid = peer_credentials(s)
        if uid != os.getuid():  # not our creator: the key goes to our own user only
            raise ConnectionError(f"the segment's socket belongs to uid {uid}, not to this "
                                  f"user ({os.getuid()})")
        s.sendall(key)
        _, fds, _, _ = socket.recv_fds(s, 1, 1)
    if not fds:
        raise ConnectionError("the segment's creator closed the connection")
    for extra in fds[1:]:
        os.close(extra)
    return fds[0], size


def _recv_exact(conn: socket.socket, n: int, deadline: float) -> bytes | None:
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out after {len(buf)} of {n} bytes")
        conn.settimeout(left)
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def share_anonymous(ex: Exchange, group: list[int], label: str, size: int) -> mmap.mmap:
    """Collective over ``group`` (ranks of ``ex``): member 0 creates a segment of ``size``
    bytes, every member maps it. ``label`` names it in ``/proc/PID/maps`` and in errors.

    A creator that dies before a member got the descriptor is a :class:`PeerLost` naming it
    on that member; the segment then dies with the last process that held it.
    """
    if ex.rank == group[0]:
        try:
            offer = SegmentOffer(size, label, len(group) - 1)
        except OSError as e:
            raise _segment_error(ex, "create", label, e) from None
        try:
            mm = _map(ex, offer.fd, size, label)
            acks = [bytearray(8) for _ in group[1:]]
            for peer in group[1:]:
                ex.send(peer, offer.note)
            for peer, ack in zip(group[1:], acks):
                ex.recv(peer, memoryview(ack))
            ex.run()
        finally:
            offer.close()
        return mm
    note = bytearray(NOTE_BYTES)
    ex.recv(group[0], memoryview(note))
    ex.run()
    try:
        fd, size = receive_segment(bytes(note), ex.deadline)
    except (ConnectionError, FileNotFoundError, TimeoutError) as e:
        # The creator's socket is gone: it died, or the collective failed on its side (its
        # ABORT frame, sent first, says why).
        cause = ex.lost(group[0], f"its shared-memory segment could not be received: {e}")
        ex.abort(cause)
        raise cause from None
    except OSError as e:
        raise _segment_error(ex, "receive", label, e) from None
    try:
        mm = _map(ex, fd, size, label)
    finally:
        os.close(fd)
    ex.send(group[0], memoryview(note[:8]))
    ex.run()
    return mm


def _segment_error(ex: Exchange, verb: str, label: str, e: OSError) -> CollectiveError:
    err = CollectiveError(f"rank {ex.origin}: {ex.what}: cannot {verb} the shared-memory "
                          f"segment {label} ({e.strerror or e})", rank=ex.origin,
                          operation=ex.what)
    ex.abort(err)
    return err


def _map(ex: Exchange, fd: int, size: int, label: str) -> mmap.mmap:
    """Map the segment (not populated: :class:`~.shmgroup.ShmGroup` faults in the parts
    every collective uses; an area's rest becomes resident only where a call writes it)."""
    try:
        return mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as e:
        raise _segment_error(ex, "map", label, e) from None
