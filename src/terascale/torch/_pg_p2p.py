"""The process group's point-to-point operations, and the collectives built beside them.

``dist.send``/``recv``/``isend``/``irecv`` (from a given rank or any source, with tags) and
``dist.batch_isend_irecv`` run on :class:`terascale.transport.p2p.PointToPoint`: links of
their own, one TCP connection per ordered pair, so they never interleave with the
collectives' traffic on the communicator. They are authenticated like the collectives'
links (records under the job's link security: integrity, or encryption with
TERASCALE_ENCRYPT), on a secret of each pair's own from an X25519 exchange over the
communicator. Tensors of every dtype travel as their bytes
(torch hands complex tensors over as their real view); the receiving tensor must have the
sender's size in bytes, as with gloo.

A send returns once its bytes are handed to the kernel: the receiver always drains its
links (a message that arrives before its receive is queued), so a batch of sends and
receives in any order never deadlocks. A receive's work completes when the message is in
the tensor; ``wait()`` raises :class:`~terascale.PeerTimeout` past the group's deadline
("Timed out ..."), :class:`~terascale.PeerLost` when the sender's process went away.

Also here: the monitored barrier (torch lets a backend provide it only under the name
``gloo``; see :meth:`monitored_barrier`), sparse COO ``all_reduce`` with SUM as gloo does
it (indices gathered, values summed per index), and the bitwise reduce ops BAND/BOR/BXOR
(integers and bool: every rank's tensors gathered and folded in rank order).
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from torch.futures import Future

from .._env import read_flag
from .._errors import CollectiveError, ConfigError, PeerLost, PeerTimeout
from ..communicator import Communicator
from ..transport import stronger_mode as stronger
from ..transport.p2p import PointToPoint, Request
from ._pg_staging import op_name
from ._pg_work import Work, completed, wait_seconds

__all__ = ["BITWISE", "P2P", "TorchPeerLost", "TorchTimeout", "allgather_coalesced", "as_torch_error",
           "bitwise_allreduce", "is_bitwise", "monitored_barrier", "sparse_allreduce", "torch_timeout"]

# (op, fold): torch's ReduceOp compares equal to its enum but does not hash like it
BITWISE = [(dist.ReduceOp.BAND, torch.bitwise_and), (dist.ReduceOp.BOR, torch.bitwise_or),
           (dist.ReduceOp.BXOR, torch.bitwise_xor)]


def is_bitwise(op: Any) -> bool:
    """Whether ``op`` is BAND, BOR or BXOR."""
    return any(op == o for o, _ in BITWISE)


class SentWork(Work):
    """The work of a send, done when it is made (a send returns once its bytes are handed
    to the kernel); its future is made only when asked for."""

    def __init__(self, value: list[torch.Tensor]) -> None:
        dist._Work.__init__(self)
        self._value = value
        self._fut: Future[Any] | None = None  # type: ignore[assignment]
        self._source = None

    def get_future(self) -> Future[Any]:
        if self._fut is None:
            fut: Future[Any] = Future()
            fut.set_result(self._value)
            self._fut = fut
        return self._fut

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self) -> Any:
        return None


class RecvWork(Work):
    """The work of a receive: done once the message is in the tensor. ``wait()`` waits on
    the receive itself (no other thread on the path) and raises its failure;
    ``_source_rank()`` is the sender (what ``dist.recv(src=None)`` returns). The future is
    made only when asked for (``get_future``): completing one takes a hand-off to the
    group's completion thread, which a plain ``dist.recv`` has no use for."""

    def __init__(self, p2p: P2P, value: list[torch.Tensor]) -> None:
        dist._Work.__init__(self)
        self._p2p = p2p
        self._value = value
        self._lock = threading.Lock()
        self._fut: Future[Any] | None = None  # type: ignore[assignment]
        self._source = None
        self._request: Request | None = None
        self._settled: Request | None = None

    def _error(self, req: Request) -> BaseException | None:
        error = req.error
        return as_torch_error(error) if isinstance(error, CollectiveError) else error

    def settle(self, req: Request) -> None:
        """The receive completed (its callback, in the thread that completed it)."""
        with self._lock:
            self._settled = req
            fut = self._fut
        if fut is not None:  # futures are completed by the group's thread (callbacks run there)
            self._p2p._done.put((fut, self._value, self._error(req)))

    def get_future(self) -> Future[Any]:
        with self._lock:
            if self._fut is None:
                self._fut = Future()
                req = self._settled
                if req is not None:  # done already: a new future has no callbacks yet
                    error = self._error(req)
                    if error is not None:
                        self._fut.set_exception(error)
                    else:
                        self._fut.set_result(self._value)
            return self._fut

    def wait(self, timeout: Any = None) -> bool:
        """Wait for the message; its failure raised as torch code catches it. ``timeout``
        (a ``timedelta``, as torch passes it) stops the wait sooner than the group's
        deadline with a PeerTimeout that is also a ``RuntimeError`` (as gloo's
        ``wait(timeout)``); the receive stays posted and a later ``wait`` completes it."""
        assert self._request is not None
        try:
            self._request.wait(wait_seconds(timeout))  # PeerTimeout/PeerLost/CollectiveMismatch
        except CollectiveError as e:
            raise as_torch_error(e) from None
        return True

    def is_completed(self) -> bool:
        return self._request is not None and self._request.done()

    def is_success(self) -> bool:
        return self.is_completed() and self._request.error is None  # type: ignore[union-attr]

    def exception(self) -> Any:
        if not self.is_completed():
            return None
        return self._error(self._request)  # type: ignore[arg-type]

    def _source_rank(self) -> int:
        assert self._request is not None
        return self._request.wait()

    source_rank = _source_rank


def _failed(e: BaseException) -> Work:
    fut: Future[Any] = Future()
    fut.set_exception(e)
    return Work(fut)


def _security_of(comm: Communicator) -> str:
    """This rank's link security: its TCP links' mode (agreed across the job), or what it
    asked for itself (TERASCALE_ENCRYPT) when it has none."""
    socks = getattr(getattr(comm, "_mesh", None), "socks", None) or {}
    modes = {getattr(s, "mode", None) for s in socks.values()}
    if "encrypt" in modes or read_flag(os.environ, "TERASCALE_ENCRYPT"):
        return "encrypt"
    return "integrity"


def _pair_secret(key: X25519PrivateKey, mine: bytes, theirs: bytes) -> bytes:
    """The secret two ranks' point-to-point links authenticate with (the same on both)."""
    shared = key.exchange(X25519PublicKey.from_public_bytes(theirs))
    lo, hi = sorted((mine, theirs))
    return hashlib.sha256(b"terascale p2p pair|" + shared + lo + hi).digest()


def _host_of(comm: Communicator) -> str:
    """An address of this host that the group's other ranks reach."""
    if len(set(comm.hosts)) <= 1:
        return "127.0.0.1"
    socks = getattr(getattr(comm, "_mesh", None), "socks", None) or {}
    for s in socks.values():
        try:
            return str(s.getsockname()[0])
        except (OSError, AttributeError):
            continue
    return "127.0.0.1"


class P2P:
    """One group's point-to-point: the links, and the thread that completes futures."""

    def __init__(self, comm: Communicator, timeout: float) -> None:
        self.rank, self.size, self.timeout = comm.rank, comm.size, timeout
        key = X25519PrivateKey.generate()
        mine = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        host = _host_of(comm)
        # One collective at group creation, over the communicator's authenticated links:
        # every rank's address, its X25519 public key and its link security. Each pair's
        # links authenticate with a secret of that pair's own (a Diffie-Hellman exchange:
        # nobody who reads the collectives' traffic -- in clear in the integrity mode --
        # learns it), and run the strongest mode any rank asked for.
        probe = PointToPoint(comm.rank, comm.size, b"", host=host, timeout=timeout)
        try:
            rows = comm.allgather_object((probe.address, mine.hex(), _security_of(comm)),
                                         timeout=timeout)
        except BaseException:
            probe.close()
            raise
        pubs = [bytes.fromhex(pub) for _, pub, _ in rows]
        probe._secret = [b"" if p == comm.rank else _pair_secret(key, mine, pubs[p])
                         for p in range(comm.size)]
        probe.security = "integrity"
        for _, _, mode in rows:
            probe.security = stronger(probe.security, str(mode))
        probe.connect_to([tuple(a) for a, _, _ in rows])
        self.links = probe
        self._done: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._complete, daemon=True,
                                        name=f"terascale-p2p-done-{comm.rank}")
        self._thread.start()

    def close(self) -> None:
        self.links.close()
        self._done.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def _complete(self) -> None:
        # Futures are completed here, never in a link's reader: a callback chained on a
        # receive may itself receive from the same peer.
        while True:
            item = self._done.get()
            if item is None:
                return
            fut, value, error = item
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(value)

    def _check_peer(self, peer: int, what: str) -> None:
        if not 0 <= peer < self.size:
            raise ConfigError(f"rank {self.rank}: {what} names rank {peer}, but the group "
                              f"has ranks 0..{self.size - 1}")

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> Work:
        self._check_peer(dst, "send")
        t = _one(tensors, "send", self.rank)
        if t.requires_grad:
            t = t.detach()
        if t.device.type != "cpu" or not t.is_contiguous():
            t = t.cpu().contiguous()
        try:
            self.links.send(dst, int(tag), _bytes(t), self.timeout)
        except CollectiveError as e:
            return _failed(as_torch_error(e))
        return SentWork(tensors)

    def recv(self, tensors: list[torch.Tensor], src: int | None, tag: int) -> Work:
        if src is not None:
            self._check_peer(src, "recv")
        t = _one(tensors, "recv", self.rank)
        out = t.detach() if t.requires_grad else t
        direct = out.device.type == "cpu" and out.is_contiguous()
        stage = out if direct else torch.empty(out.shape, dtype=out.dtype)
        work = RecvWork(self, tensors)

        def done(req: Request) -> None:
            if req.error is None and not direct:
                out.copy_(stage)
            work.settle(req)

        work._request = self.links.post_recv(src, int(tag), _bytes(stage), self.timeout, done)
        return work


# dtypes numpy holds as they are (the others are viewed as bytes first: a torch call more)
_NUMPY = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128}


def _bytes(t: torch.Tensor) -> memoryview:
    """A contiguous CPU tensor's bytes, writable, keeping its storage alive."""
    if t.dtype in _NUMPY and t.dim() > 0:
        return memoryview(t.numpy()).cast("B")
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


def _one(tensors: list[torch.Tensor], what: str, rank: int) -> torch.Tensor:
    if len(tensors) != 1:
        raise ConfigError(f"rank {rank}: {what} takes one tensor, got {len(tensors)}")
    t = tensors[0]
    if t.is_sparse:
        raise ConfigError(f"rank {rank}: {what} of a sparse tensor; send its indices and "
                          "values")
    return t


# -- collectives beside point-to-point ---------------------------------------------------
def bitwise_allreduce(pg: Any, tensors: list[torch.Tensor], op: Any) -> Work:
    """BAND/BOR/BXOR: every rank's tensor gathered, folded in rank order (integers, bool)."""
    fold = next(f for o, f in BITWISE if op == o)
    for t in tensors:
        if t.is_floating_point() or t.is_complex():
            raise ConfigError(f"rank {pg.rank()}: {op_name(op)} needs an integer or bool tensor, not "
                              f"{t.dtype}")
        rows = [torch.empty_like(t) for _ in range(pg.size())]
        pg.allgather([rows], [t]).wait()
        acc = rows[0].clone()
        for r in rows[1:]:
            acc = fold(acc, r)
        t.detach().copy_(acc)
    return completed(tensors)


def sparse_allreduce(pg: Any, tensors: list[torch.Tensor], op: Any) -> Work:
    """Sparse COO SUM as gloo does it: every rank's indices and values gathered, the
    concatenation coalesced (values at one index summed in rank order); the result is
    written into the input tensor (torch's ``all_reduce`` contract) and the work's result."""
    if op != dist.ReduceOp.SUM:
        raise ConfigError(f"rank {pg.rank()}: sparse all_reduce supports SUM only, not {op_name(op)}")
    out = []
    for t in tensors:
        c = t.coalesce()
        idx, val = c.indices(), c.values()
        counts = [torch.zeros(1, dtype=torch.int64) for _ in range(pg.size())]
        pg.allgather([counts], [torch.tensor([idx.shape[1]], dtype=torch.int64)]).wait()
        n = max(int(k) for k in counts)
        pad_i = torch.zeros((idx.shape[0], n), dtype=idx.dtype)
        pad_i[:, :idx.shape[1]] = idx
        pad_v = torch.zeros((n, *val.shape[1:]), dtype=val.dtype)
        pad_v[:val.shape[0]] = val
        rows_i = [torch.empty_like(pad_i) for _ in range(pg.size())]
        rows_v = [torch.empty_like(pad_v) for _ in range(pg.size())]
        pg.allgather([rows_i], [pad_i]).wait()
        pg.allgather([rows_v], [pad_v]).wait()
        all_i = torch.cat([ri[:, :int(k)] for ri, k in zip(rows_i, counts)], dim=1)
        all_v = torch.cat([rv[:int(k)] for rv, k in zip(rows_v, counts)], dim=0)
        result = torch.sparse_coo_tensor(all_i, all_v, t.shape).coalesce()
        with torch.no_grad():
            t.copy_(result)  # sparse copy_ takes the result's indices and values
        out.append(result)
    return completed(out)


def allgather_coalesced(pg: Any, outputs: list[list[torch.Tensor]],
                        inputs: list[torch.Tensor]) -> Work:
    """``dist.all_gather_coalesced``: ``outputs[r][j]`` is rank ``r``'s ``inputs[j]``; one
    all_gather per input (tensors of any dtypes and shapes)."""
    n = pg.size()
    if len(outputs) != n or any(len(o) != len(inputs) for o in outputs):
        raise ConfigError(f"rank {pg.rank()}: all_gather_coalesced needs {n} output lists of "
                          f"{len(inputs)} tensors")
    for j, t in enumerate(inputs):
        pg.allgather([[outputs[r][j] for r in range(n)]], [t]).wait()
    return completed(outputs)


class TorchTimeout(PeerTimeout, RuntimeError):
    """A :class:`~terascale.PeerTimeout` worded as torch words its timeouts ("Timed out")
    and caught by torch code that catches ``RuntimeError``, as gloo's are."""


class TorchPeerLost(PeerLost, RuntimeError):
    """A :class:`~terascale.PeerLost` that torch code catching ``RuntimeError`` catches."""


def as_torch_error(e: CollectiveError) -> CollectiveError:
    """``e`` as the class torch code catches too (``RuntimeError``), same message and
    fields: a timeout or a lost peer; anything else as it is."""
    for ours, theirs in ((PeerTimeout, TorchTimeout), (PeerLost, TorchPeerLost)):
        if isinstance(e, ours) and not isinstance(e, RuntimeError):
            return theirs(str(e), rank=e.rank, peer=e.peer, operation=e.operation)
    return e


def torch_timeout(e: CollectiveError, operation: str) -> TorchTimeout:
    """``e`` worded as torch words a timeout, still naming rank, peer and operation."""
    rank = e.rank if e.rank is not None else "?"
    peer = f" with peer {e.peer}" if e.peer is not None else ""
    return TorchTimeout(f"rank {rank}, {operation}{peer}: Timed out ({e})", rank=e.rank,
                        peer=e.peer, operation=e.operation or operation)


def monitored_barrier(comm: Communicator, p2p: P2P, timeout: Any, wait_all_ranks: bool) -> Work:
    """Rank 0 waits for every other rank's arrival (point-to-point, on a reserved tag), then
    releases them. Past ``timeout`` rank 0 raises naming the rank that did not arrive (the
    first, or all of them with ``wait_all_ranks``), worded as gloo words it, and the others
    raise that rank 0 did not release them."""
    if timeout is None:
        seconds = p2p.timeout
    else:
        seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)
    tag = -0x7E5
    rank, size = comm.rank, comm.size
    token = torch.zeros(1, dtype=torch.uint8)
    if rank != 0:
        got = torch.zeros(1, dtype=torch.uint8)
        try:
            p2p.links.send(0, tag, memoryview(token.numpy()), max(seconds, 0.001))
            p2p.links.post_recv(0, tag, memoryview(got.numpy()), max(seconds, 0.001)).wait()
        except CollectiveError as e:
            raise TorchTimeout(
                f"Rank {rank} successfully reached monitoredBarrier, but received errors "
                f"while waiting for send/recv from rank 0 (Timed out after {seconds:g} s; {e})",
                rank=rank, peer=0, operation="monitored_barrier") from None
        return completed([])
    if seconds <= 0:
        raise TorchTimeout(f"Rank 0 timed out in monitoredBarrier after {seconds * 1000:g} ms",
                           rank=0, peer=None, operation="monitored_barrier")
    deadline = time.monotonic() + seconds
    missing = []
    bufs = {r: torch.zeros(1, dtype=torch.uint8) for r in range(1, size)}
    reqs = {r: p2p.links.post_recv(r, tag, memoryview(bufs[r].numpy()), seconds)
            for r in range(1, size)}
    for r, req in reqs.items():
        try:
            req.wait()
        except CollectiveError:
            missing.append(r)
            if not wait_all_ranks:
                break
    if missing:
        which = (f"Ranks {', '.join(map(str, missing))} failed" if wait_all_ranks
                 else f"Rank {missing[0]} failed")
        raise TorchTimeout(f"{which} to pass monitoredBarrier in {seconds * 1000:g} ms "
                           "(rank 0, monitored_barrier: Timed out)", rank=0, peer=missing[0],
                           operation="monitored_barrier")
    for r in range(1, size):
        p2p.links.send(r, tag, memoryview(token.numpy()), max(deadline - time.monotonic(), 1.0))
    return completed([])
