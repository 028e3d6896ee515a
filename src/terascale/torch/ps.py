"""A centralized parameter server: the baseline allreduce is measured against (DistBelief,
Dean et al., NIPS 2012).

Rank 0 keeps the master copy of the parameters and an SGD optimizer and serves every worker
(itself included) over its own connections: a worker pushes its gradient and pulls the new
parameters. ``mode="sync"`` waits for every worker's gradient, averages them in rank order
and answers all (synchronous SGD, deterministic); ``mode="async"`` applies each gradient
the moment it arrives and answers only that worker (Dean et al. 2012, "Downpour SGD"):
no waiting, but stale gradients and a result that depends on thread timing. Either way all
traffic goes through rank 0, which sends ``n`` full copies of the model per round while an
allreduce spreads the same work over every link, and the async mode is nondeterministic
(Agarwal et al., JMLR 2014, section 3). Measured in ``terascale bench torch``.

Its connections are as safe as the job's own links: every rank draws an X25519 key pair and
the public halves go round over the job's authenticated links (so nobody on the path can
substitute one), rank 0 and each worker derive a key of their own from them that never
crosses the wire, run the HMAC handshake on it (:mod:`terascale._auth`) and seal every
message after it with AES-256-GCM, a key per direction and a counter per message. An
altered, replayed or reordered message raises :class:`~terascale._errors.LinkTampered`; a
stranger on rank 0's port holds one vetting thread for a few seconds, never the job.

A failure ends every rank, within the communicator's deadline, with an error naming rank,
peer and operation: the side that finds a message altered (or the connection gone) tells the
other over the direction still intact, in a sealed notice (the top bit of its length, a
nonce of its own kind, so nothing else can pass for one), and rank 0 hands the same verdict
to every worker at its next exchange. A synchronous round waits at most the communicator's
timeout for the workers' gradients (``PeerTimeout`` naming the missing ranks), so no rank
waits forever on a round that cannot complete.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

import numpy as np
import torch

from .._admission import Admission
from .._auth import accept_handshake, derive_keys, dial_handshake, recv_exact
from .._env import read_bind
from .._errors import AuthError, CollectiveError, ConfigError, LinkTampered, PeerLost, PeerTimeout
from ..communicator import Communicator
from ._comm import resolve
from ._flat import unflatten_into

__all__ = ["ParameterServer"]

_HELLO_S = 5.0  # time a connection to rank 0 gets to name its rank and authenticate
_PER_SOURCE = 16  # unauthenticated connections one address may hold; more evict its oldest
_MAX_PENDING = 256  # unauthenticated connections in all; more evict the oldest of all
_LEN = struct.Struct(">Q")
_NONCE = struct.Struct("<IQ")  # a message's kind (0 data, 1 notice) and its number
_NOTICE = 1 << 63  # the top bit of a notice's length
_NOTICE_MAX = 4096  # a notice's text, at most
_KINDS = {c.__name__: c for c in (LinkTampered, PeerLost, PeerTimeout)}
_OP = "parameter server"


class _Sealed:
    """Messages of one parameter-server connection, sealed with AES-256-GCM after the
    handshake: ``length u64 (associated data) | ciphertext | tag``, nonce = the message's
    number in its direction."""

    def __init__(self, sock: socket.socket, key: bytes, nonces: bytes, *, dialer: bool,
                 rank: int, peer: int, limit: int) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        d2a, a2d = derive_keys(key, nonces, "parameter server")
        mine, theirs = (d2a, a2d) if dialer else (a2d, d2a)
        self.sock, self._seal, self._open = sock, AESGCM(mine), AESGCM(theirs)
        self._sent = self._opened = 0
        self.rank, self.peer, self._limit = rank, peer, limit

    def send(self, data: bytes, deadline: float, *, notice: bool = False) -> None:
        head = _LEN.pack((len(data) + 16) | (_NOTICE if notice else 0))
        body = self._seal.encrypt(_NONCE.pack(notice, self._sent), data, head)
        self._sent += 1
        self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        self.sock.sendall(head + body)

    def recv(self, deadline: float) -> bytes:
        """The next message. A notice from the other side raises the error it carries (as
        this rank's, naming the other side); an altered message raises LinkTampered."""
        what = f"rank {self.rank}: parameter-server link with rank {self.peer}"
        head = recv_exact(self.sock, _LEN.size, deadline)
        (field,) = _LEN.unpack(head)
        notice, n = bool(field & _NOTICE), field & ~_NOTICE
        if not 16 <= n <= (_NOTICE_MAX if notice else self._limit) + 16:
            raise LinkTampered(f"{what}: a message claims {n} bytes (altered on the wire?)",
                               rank=self.rank, peer=self.peer, operation=_OP)
        body = recv_exact(self.sock, n, deadline)
        try:
            data = self._open.decrypt(_NONCE.pack(notice, self._opened), body, head)
        except Exception:  # cryptography's InvalidTag
            raise LinkTampered(f"{what}: a message failed its authentication tag (altered, "
                               "replayed or reordered on the wire)", rank=self.rank,
                               peer=self.peer, operation=_OP) from None
        self._opened += 1
        if notice:
            info = json.loads(data)
            cls = _KINDS.get(str(info.get("type")), PeerLost)
            err = cls(f"rank {self.rank}: rank {self.peer} ended the parameter-server link: "
                      f"{info.get('message')}", rank=self.rank, peer=self.peer, operation=_OP)
            err.from_link = self  # type: ignore[attr-defined]  # the other side knows already
            raise err
        return data

    def tell(self, err: BaseException, deadline: float) -> None:
        """Tell the other side why this link ends (best effort: it may be gone)."""
        if getattr(err, "from_link", None) is self:
            return
        text = json.dumps({"type": type(err).__name__, "message": str(err)[:_NOTICE_MAX - 200]})
        try:
            self.send(text.encode(), deadline, notice=True)
        except OSError:
            pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class _Server:
    """Rank 0's master parameters and the gradient rounds."""

    def __init__(self, flat: torch.Tensor, n: int, mode: str, lr: float, momentum: float) -> None:
        self.master = torch.nn.Parameter(flat.detach().clone())
        self.opt = torch.optim.SGD([self.master], lr=lr, momentum=momentum)
        self.n, self.mode = n, mode
        self.cv = threading.Condition()
        self.round: dict[int, np.ndarray] = {}
        self.generation = 0
        self.current = self.master.detach().numpy().copy()
        self.initial = self.current
        self.updates = 0
        self.failure: BaseException | None = None
        self.serving = 0  # serving threads still running (each ends with its worker told)

    def push(self, rank: int, grad: np.ndarray, deadline: float) -> np.ndarray:
        """Apply ``rank``'s gradient (sync: once every rank's is in, waiting until
        ``deadline`` at most); raises the job's first failure instead, if there was one."""
        with self.cv:
            if self.failure is not None:
                raise self.failure
            if self.mode == "async":
                self._apply(grad)
                return self.current
            gen = self.generation
            self.round[rank] = grad
            if len(self.round) == self.n:
                total = self.round[0].copy()
                for r in range(1, self.n):
                    total += self.round[r]
                self._apply(total / np.float32(self.n))
                self.round = {}
                self.generation += 1
                self.cv.notify_all()
            while self.generation == gen and self.failure is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(self.n)) - set(self.round))
                    self.failure = PeerTimeout(
                        f"rank 0: parameter server round {gen} timed out waiting for the "
                        f"gradients of ranks {missing}", rank=0, peer=missing[0], operation=_OP)
                    self.cv.notify_all()
                    break
                self.cv.wait(left)
            if self.generation == gen:
                assert self.failure is not None
                raise self.failure
            return self.current

    def serving_threads(self, delta: int) -> None:
        """A serving thread started (+1) or ended, its worker told why (-1)."""
        with self.cv:
            self.serving += delta
            self.cv.notify_all()

    def settle(self, deadline: float) -> None:
        """Wait (until ``deadline`` at most) for the serving threads to end: after a
        failure, each tells its worker at the worker's next exchange, before this process
        may exit and leave the worker with only a lost connection."""
        with self.cv:
            while self.serving and (left := deadline - time.monotonic()) > 0:
                self.cv.wait(left)

    def fail(self, err: BaseException) -> None:
        """Record the job's first failure and wake every rank waiting on a round."""
        with self.cv:
            if self.failure is None:
                self.failure = err
            self.cv.notify_all()

    def _apply(self, grad: np.ndarray) -> None:
        self.master.grad = torch.from_numpy(grad)
        self.opt.step()
        self.current = self.master.detach().numpy().copy()
        self.updates += 1


class ParameterServer:
    """Train ``model`` through a parameter server on rank 0; call :meth:`step` after backward.

    The optimizer is SGD(``lr``, ``momentum``) held by the server. All ranks start from
    rank 0's parameters. ``bytes_sent``/``bytes_received`` count this rank's payload bytes.
    ``address`` is the server's (rank 0's address in the rendezvous table, where the other
    ranks already reach it; loopback when every rank is on one host).

    Parameters
    ----------
    mode
        ``"sync"`` (default: rank 0 applies the average of every worker's gradient once per step;
        the same result as allreduce SGD) or ``"async"`` (each worker's gradient is applied as it
        arrives; nondeterministic).
    comm
        The communicator (default None: the process's ``terascale.init()``, made once on first use
        and shared by every object of ``terascale.torch``).
    model
        The module to train; every rank starts from rank 0's parameters.
    lr
        The server's SGD learning rate.
    momentum
        The server's SGD momentum (default 0.0).
    """

    def __init__(self, model: torch.nn.Module, *, lr: float, momentum: float = 0.0,
                 mode: str = "sync", comm: Communicator | None = None) -> None:
        if mode not in ("sync", "async"):
            raise ConfigError(f"mode={mode!r} is not known; use 'sync' or 'async'")
        self.comm = resolve(comm)
        self.model, self.mode = model, mode
        self.params = [p for p in model.parameters() if p.requires_grad]
        if any(p.dtype != torch.float32 for p in self.params):
            raise ConfigError("the parameter-server baseline supports float32 parameters only: "
                              "train a float32 copy (model.float()), or use "
                              "DistributedOptimizer, which takes float16 and bfloat16")
        self.numel = sum(p.numel() for p in self.params)
        self.bytes_sent = 0
        self.bytes_received = 0
        self._threads: list[threading.Thread] = []
        self._conn: _Sealed | None = None
        self.address: tuple[str, int]
        self._timeout = float(getattr(self.comm, "timeout", 60.0))
        flat = self._flat_params()
        # Keys: X25519 between rank 0 and each worker, the public halves over the job's
        # authenticated links (readable there by default, but not replaceable).
        from cryptography.hazmat.primitives.asymmetric.x25519 import (
            X25519PrivateKey,
            X25519PublicKey,
        )

        mine = X25519PrivateKey.generate()
        publics = self.comm.allgather_object(mine.public_key().public_bytes_raw())
        shared = [b"" if r == self.comm.rank or (self.comm.rank and r) else
                  mine.exchange(X25519PublicKey.from_public_bytes(publics[r]))
                  for r in range(self.comm.size)]
        if self.comm.rank == 0:
            self.server: _Server | None = _Server(flat, self.comm.size, mode, lr, momentum)
            # Listen where the other ranks already reach this one (its address in the
            # rendezvous table: right in containers and network namespaces, where the
            # hostname's address may be another interface's or none), loopback when every
            # rank is on this host; TERASCALE_BIND overrides it.
            same_host = len(set(self.comm.hosts)) == 1
            host = "127.0.0.1" if same_host else self.comm.addresses[self.comm.rank]
            bind = read_bind() or host
            listener = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET)
            listener.bind((bind, 0))
            listener.listen(max(self.comm.size, 16))
            self.address = (host, int(listener.getsockname()[1]))
            self.comm.broadcast_object(self.address)
            t = threading.Thread(target=self._accept, args=(listener, shared), daemon=True)
            t.start()
            self._threads.append(t)
        else:
            self.server = None
            host, port = self.comm.broadcast_object(None)
            self.address = (host, port)
            self._conn = self._dial(shared[0])
        self._load(flat.numpy() if self.comm.rank == 0 else self._pull_initial())

    def _dial(self, key: bytes) -> _Sealed:
        """Connect to rank 0's server and authenticate; a connection closed before the
        verdict (rank 0 sheds the oldest pending connections of a busy source, and a
        flood of strangers may share this worker's address) is tried again until the
        deadline."""
        rank = self.comm.rank
        deadline = time.monotonic() + self._timeout
        while True:
            sock = None
            try:
                sock = socket.create_connection(self.address, timeout=_HELLO_S)
                sock.sendall(_LEN.pack(rank))
                nonces = dial_handshake(sock, key, deadline)
                return _Sealed(sock, key, nonces, dialer=True, rank=rank, peer=0,
                               limit=self.numel * 4)
            except AuthError as e:
                sock.close()  # type: ignore[union-attr]
                raise AuthError(f"rank {rank}: the parameter server at {self.address[0]}:"
                                f"{self.address[1]} failed authentication: {e}") from None
            except (OSError, TimeoutError) as e:
                if sock is not None:
                    sock.close()
                if time.monotonic() + 0.05 >= deadline:
                    raise PeerLost(f"rank {rank}: cannot reach the parameter server at "
                                   f"{self.address[0]}:{self.address[1]}: {e}", rank=rank,
                                   peer=0, operation=_OP) from None
                time.sleep(0.05)

    # -- server side (rank 0) ----------------------------------------------------------------
    def _accept(self, listener: socket.socket, keys: list[bytes]) -> None:
        """Admit every worker before the deadline: each connection is vetted in a thread
        of its own (its rank, then the handshake on that rank's key, within ``_HELLO_S``),
        so a stranger on this port delays nobody."""
        deadline = time.monotonic() + self._timeout
        taken: set[int] = set()
        lock = threading.Lock()
        size = self.comm.size
        admission = Admission(per_source=max(_PER_SOURCE, size),
                              total=max(_MAX_PENDING, 2 * size))

        def vet(conn: socket.socket) -> None:
            step = min(deadline, time.monotonic() + _HELLO_S)
            try:
                try:
                    (rank,) = _LEN.unpack(recv_exact(conn, _LEN.size, step))
                    if not 0 < rank < self.comm.size:
                        raise ValueError(f"rank {rank} is not a worker")
                    nonces = accept_handshake(conn, keys[rank], step)
                finally:
                    admission.done(conn)  # authenticated, or about to be closed
                with lock:
                    if rank in taken:
                        raise ValueError(f"rank {rank} is connected already")
                    taken.add(rank)
                link = _Sealed(conn, keys[rank], nonces, dialer=False, rank=0, peer=rank,
                               limit=self.numel * 4)
                assert self.server is not None
                self.server.serving_threads(+1)
                try:
                    link.send(self.server.initial.tobytes(), time.monotonic() + self._timeout)
                except BaseException:
                    self.server.serving_threads(-1)
                    raise
            except (OSError, ValueError, AuthError, struct.error):
                conn.close()  # a stranger, a wrong key or garbage: the job goes on
                return
            self._serve(link, rank)

        try:
            listener.settimeout(0.2)
            while time.monotonic() < deadline:
                with lock:
                    if len(taken) == self.comm.size - 1:
                        break
                try:
                    conn, who = listener.accept()
                except TimeoutError:
                    continue
                except OSError:  # out of descriptors for now: shed the oldest stranger
                    admission.evict(None)
                    time.sleep(0.01)
                    continue
                admission.admit(conn, str(who[0]))
                t = threading.Thread(target=vet, args=(conn,), daemon=True,
                                     name="terascale-ps-serve")
                t.start()
                self._threads.append(t)
        finally:
            listener.close()
            admission.shut_all()

    def _serve(self, link: _Sealed, rank: int) -> None:
        server = self.server
        assert server is not None
        err: BaseException
        try:
            try:
                while True:
                    # A worker's next gradient comes within its step time; the deadline is
                    # the job's, so a lost worker frees this thread (its rank sees PeerLost).
                    payload = link.recv(time.monotonic() + 10 * self._timeout)
                    if not payload:
                        return
                    params = server.push(rank, np.frombuffer(payload, np.float32).copy(),
                                         time.monotonic() + self._timeout)
                    link.send(params.tobytes(), time.monotonic() + self._timeout)
            except (AuthError, CollectiveError) as e:  # this link's verdict, or the job's
                err = e
            except (OSError, TimeoutError, ValueError) as e:
                err = PeerLost(f"rank 0: lost worker rank {rank} on the parameter-server link "
                               f"({e})", rank=0, peer=rank, operation=_OP)
            server.fail(err)
            link.tell(err, time.monotonic() + 1.0)
        finally:
            link.close()
            server.serving_threads(-1)

    # -- worker side -------------------------------------------------------------------------
    def _pull_initial(self) -> np.ndarray:
        assert self._conn is not None
        return np.frombuffer(self._recv(), np.float32)

    def _recv(self) -> bytes:
        assert self._conn is not None
        rank = self.comm.rank
        try:
            return self._conn.recv(time.monotonic() + self._timeout)
        except LinkTampered as e:  # rank 0 must know too: it would wait on this rank's round
            self._conn.tell(e, time.monotonic() + 1.0)
            raise
        except TimeoutError:
            raise PeerTimeout(f"rank {rank}: the parameter server did not answer "
                              f"within {self._timeout:g} s", rank=rank, peer=0,
                              operation=_OP) from None
        except OSError as e:
            raise PeerLost(f"rank {rank}: the parameter server went away: {e}",
                           rank=rank, peer=0, operation=_OP) from None

    def _flat_params(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1).cpu().float() for p in self.params])

    def _load(self, flat: np.ndarray) -> None:
        unflatten_into(self.params, torch.from_numpy(np.array(flat, np.float32, copy=True)))

    def step(self) -> None:
        """Push this worker's gradient, pull the server's parameters into the model."""
        grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p))
                          .detach().reshape(-1).cpu().float() for p in self.params]).numpy()
        if self.server is not None:
            deadline = time.monotonic() + self._timeout
            try:
                params = self.server.push(0, grad, deadline)
            except BaseException:  # the workers hear why within this round's deadline
                self.server.settle(max(deadline, time.monotonic() + 1.0))
                raise
            self._load(params)
            return
        assert self._conn is not None
        try:
            self._conn.send(grad.tobytes(), time.monotonic() + self._timeout)
            self.bytes_sent += grad.nbytes
        except OSError as e:
            raise PeerLost(f"rank {self.comm.rank}: the parameter server went away: {e}",
                           rank=self.comm.rank, peer=0, operation=_OP) from None
        params = np.frombuffer(self._recv(), np.float32)
        self.bytes_received += params.nbytes
        self._load(params)

    def close(self) -> None:
        """Disconnect; on rank 0, wait (bounded) for the serving threads to end."""
        if self._conn is not None:
            try:
                self._conn.send(b"", time.monotonic() + 5.0)
            except OSError:
                pass
            self._conn.close()
            self._conn = None
        self.comm.barrier()
        for t in self._threads:
            t.join(timeout=5.0)
