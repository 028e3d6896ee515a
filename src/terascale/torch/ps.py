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
"""

from __future__ import annotations

import secrets
import threading
from multiprocessing.connection import Client, Connection, Listener

import numpy as np
import torch

from .._env import read_bind
from .._errors import ConfigError, PeerLost
from ..communicator import Communicator
from ._comm import resolve
from ._flat import unflatten_into

__all__ = ["ParameterServer"]


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

    def push(self, rank: int, grad: np.ndarray) -> np.ndarray:
        with self.cv:
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
            else:
                while self.generation == gen:
                    self.cv.wait()
            return self.current

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

    ``mode``: ``"sync"`` (default: rank 0 applies the average of every worker's gradient
    once per step; the same result as allreduce SGD) or ``"async"`` (each worker's
    gradient is applied as it arrives; nondeterministic). ``comm``: the communicator
    (default None: the process's ``terascale.init()``, made once on first use and shared
    by every object of ``terascale.torch``).
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
        self._conn: Connection | None = None
        self.address: tuple[str, int]
        flat = self._flat_params()
        if self.comm.rank == 0:
            self.server: _Server | None = _Server(flat, self.comm.size, mode, lr, momentum)
            key = secrets.token_bytes(32)
            # Listen where the other ranks already reach this one (its address in the
            # rendezvous table: right in containers and network namespaces, where the
            # hostname's address may be another interface's or none), loopback when every
            # rank is on this host; TERASCALE_BIND overrides it.
            same_host = len(set(self.comm.hosts)) == 1
            host = "127.0.0.1" if same_host else self.comm.addresses[self.comm.rank]
            listener = Listener((read_bind() or host, 0), authkey=key)
            self.address = (host, int(listener.address[1]))
            self.comm.broadcast_object((*self.address, key))
            t = threading.Thread(target=self._accept, args=(listener,), daemon=True)
            t.start()
            self._threads.append(t)
        else:
            self.server = None
            host, port, key = self.comm.broadcast_object(None)
            self.address = (host, port)
            self._conn = Client((host, port), authkey=key)
            self._conn.send_bytes(np.int64(self.comm.rank).tobytes())
        self._load(flat.numpy() if self.comm.rank == 0 else self._pull_initial())

    # -- server side (rank 0) ----------------------------------------------------------------
    def _accept(self, listener: Listener) -> None:
        try:
            for _ in range(self.comm.size - 1):
                conn = listener.accept()
                rank = int(np.frombuffer(conn.recv_bytes(), np.int64)[0])
                assert self.server is not None
                conn.send_bytes(self.server.initial.tobytes())
                t = threading.Thread(target=self._serve, args=(conn, rank), daemon=True)
                t.start()
                self._threads.append(t)
        finally:
            listener.close()

    def _serve(self, conn: Connection, rank: int) -> None:
        assert self.server is not None
        try:
            while True:
                payload = conn.recv_bytes()
                if not payload:
                    return
                params = self.server.push(rank, np.frombuffer(payload, np.float32).copy())
                conn.send_bytes(params.tobytes())
        except (EOFError, OSError):
            return
        finally:
            conn.close()

    # -- worker side -------------------------------------------------------------------------
    def _pull_initial(self) -> np.ndarray:
        assert self._conn is not None
        return np.frombuffer(self._conn.recv_bytes(), np.float32)

    def _flat_params(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1).cpu().float() for p in self.params])

    def _load(self, flat: np.ndarray) -> None:
        unflatten_into(self.params, torch.from_numpy(np.array(flat, np.float32, copy=True)))

    def step(self) -> None:
        """Push this worker's gradient, pull the server's parameters into the model."""
        grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p))
                          .detach().reshape(-1).cpu().float() for p in self.params]).numpy()
        if self.server is not None:
            self._load(self.server.push(0, grad))
            return
        assert self._conn is not None
        try:
            self._conn.send_bytes(grad.tobytes())
            self.bytes_sent += grad.nbytes
            params = np.frombuffer(self._conn.recv_bytes(), np.float32)
        except (EOFError, OSError) as e:
            raise PeerLost(f"rank {self.comm.rank}: the parameter server went away: {e}") from None
        self.bytes_received += params.nbytes
        self._load(params)

    def close(self) -> None:
        """Disconnect; on rank 0, wait (bounded) for the serving threads to end."""
        if self._conn is not None:
            try:
                self._conn.send_bytes(b"")
            except OSError:
                pass
            self._conn.close()
            self._conn = None
        self.comm.barrier()
        for t in self._threads:
            t.join(timeout=5.0)
