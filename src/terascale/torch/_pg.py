"""The process group behind the ``"terascale"`` backend (see :mod:`terascale.torch.backend`).

A Python ``torch.distributed.ProcessGroup`` (the extension point PyTorch's own tests use)
whose collectives call a :class:`~terascale.Communicator`. Each method stages the tensors
the communicator cannot take as they are (bfloat16, strided or accelerator tensors), runs the
collective and completes a torch ``Future``: at once for the collectives that run in the
calling thread, from a pool of completion threads for the asynchronous ones (a failure is
the future's error, which DDP's reducer and comm hooks read; see :mod:`._pg_work`).
Collectives start in the order they are called (the communicator numbers them under its
lock), the same order on every rank, so work objects may be waited in any order.

This module is the collectives; how a tensor is staged for the communicator (and which
reductions torch's ops map to) is :mod:`._pg_staging`, and the work objects and the
completion threads are :mod:`._pg_work`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from .._errors import ConfigError, PeerTimeout
from ..communicator import Communicator
from . import _pg_p2p as p2p
from ._pg_staging import from_wire, reduce_op, reducible, same_memory, to_wire
from ._pg_work import Completer, completed, eager_under_compile

__all__ = ["TerascaleProcessGroup"]

@eager_under_compile
class TerascaleProcessGroup(dist.ProcessGroup):
    """``torch.distributed`` collectives over a terascale :class:`~terascale.Communicator`.

    Made by ``dist.init_process_group("terascale")`` / ``dist.new_group(backend=...)``; build
    one directly (``TerascaleProcessGroup(comm)``) to hand an existing communicator to code
    that takes a ``process_group=``.

    Parameters
    ----------
    comm
        The communicator the group's collectives run on.
    owned
        Close ``comm`` when the group shuts down (default False).
    timeout
        Seconds of the point-to-point operations' deadline (default None: ``comm.timeout``).
    """

    def __init__(self, comm: Communicator, *, owned: bool = False,
                 timeout: float | None = None) -> None:
        super().__init__(comm.rank, comm.size)  # type: ignore[call-arg]
        self._comm = comm
        self._owned = owned
        self._timeout = timeout
        self._completer = Completer(comm.rank)
        self._group_name = ""
        self._group_desc = ""
        # point-to-point links of this group (one collective: addresses and a secret)
        self._p2p = p2p.P2P(comm, timeout if timeout is not None else comm.timeout)

    # -- identity ---------------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return "terascale"

    # torch names every group after creating it; a Python group keeps the names itself
    # (DeviceMesh, FSDP and the functional collectives look groups up by name).
    def setGroupName(self, name: str) -> None:  # noqa: N802
        """Record the group's name (torch calls it when it registers the group).

        Parameters
        ----------
        name
            The name torch gave the group.
        """
        self._group_name = name

    def getGroupName(self) -> str:  # noqa: N802
        return self._group_name

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        """Record the group's description (torch calls it when it registers the group).

        Parameters
        ----------
        desc
            The description torch gave the group.
        """
        self._group_desc = desc

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._group_desc

    def __repr__(self) -> str:
        return f"TerascaleProcessGroup(rank={self._comm.rank}, size={self._comm.size})"

    def shutdown(self) -> None:
        self._p2p.close()
        self._completer.close()
        if self._owned:
            self._comm.close()

    def abort(self) -> None:
        self.shutdown()

    # -- helpers ----------------------------------------------------------------------------
    def _kw(self) -> dict[str, Any]:
        return {} if self._timeout is None else {"timeout": self._timeout}

    def _sizes_equal(self, what: str, tensors: Sequence[torch.Tensor], n: int) -> None:
        bad = [tuple(t.shape) for t in tensors if t.numel() != n]
        if bad or len(tensors) != self._comm.size:
            raise ConfigError(f"rank {self._comm.rank}: {what} needs {self._comm.size} tensors "
                              f"of {n} elements, got {[tuple(t.shape) for t in tensors]}")

    # -- reductions -------------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        op = (opts or dist.AllreduceOptions()).reduceOp
        if tensors and tensors[0].is_sparse:
            return p2p.sparse_allreduce(self, tensors, op)
        if p2p.is_bitwise(op):
            return p2p.bitwise_allreduce(self, tensors, op)
        name, avg = reduce_op(opts or dist.AllreduceOptions(), self._comm.rank)
        staged = [reducible(t, avg, self._comm.rank) for t in tensors]
        handles = [self._comm.allreduce_async(s, name, out=s, **self._kw()) for s in staged]
        size = self._comm.size

        def finish(_: list[Any]) -> list[torch.Tensor]:
            for t, s in zip(tensors, staged):
                if avg:
                    s.div_(size)
                if not same_memory(t, s):
                    t.detach().copy_(s)
            return tensors

        return self._completer.work(handles, finish)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:
        a = dist.AllreduceOptions()
        if opts is not None:
            a.reduceOp = opts.reduceOp
        return self.allreduce(tensors, a)

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> Any:  # type: ignore[override]
        name, avg = reduce_op(opts, self._comm.rank)
        for t in tensors:
            s = reducible(t, avg, self._comm.rank)
            result = self._comm.allreduce(s, name, **self._kw())
            if self._comm.rank == opts.rootRank:
                if avg:
                    result.div_(self._comm.size)
                t.detach().copy_(result)
        return completed(tensors)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],  # type: ignore[override]
                       opts: Any = None) -> Any:
        out = outputs[0]
        self._sizes_equal("reduce_scatter", inputs[0], out.numel())
        return self._reduce_scatter(out, torch.stack([t.reshape(-1) for t in inputs[0]]), opts)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                              opts: Any = None) -> Any:
        if input.numel() != output.numel() * self._comm.size:
            raise ConfigError(f"rank {self._comm.rank}: reduce_scatter_tensor needs an input of "
                              f"{self._comm.size} x {output.numel()} elements, got "
                              f"{tuple(input.shape)}")
        return self._reduce_scatter(output, input.reshape(self._comm.size, -1), opts)

    def _reduce_scatter(self, out: torch.Tensor, rows: torch.Tensor, opts: Any) -> Any:
        name, avg = reduce_op(opts or dist.ReduceScatterOptions(), self._comm.rank)
        block = self._comm.reduce_scatter(reducible(rows, avg, self._comm.rank), name, **self._kw())
        if avg:
            block.div_(self._comm.size)
        out.detach().copy_(block.reshape(out.shape))
        return completed([out])

    # -- data movement ----------------------------------------------------------------------
    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Any:  # type: ignore[override]
        root = (opts or dist.BroadcastOptions()).rootRank
        for t in tensors:
            s = to_wire(t)
            self._comm.broadcast(s, root, **self._kw())
            if not same_memory(t, s) and not same_memory(t, from_wire(s, t)):
                t.detach().copy_(from_wire(s, t))
        return completed(tensors)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],  # type: ignore[override]
                  opts: Any = None) -> Any:
        src, outs = inputs[0], outputs[0]
        self._sizes_equal("all_gather", outs, src.numel())
        h = self._comm.allgather_async(to_wire(src), **self._kw())

        def finish(results: list[Any]) -> list[list[torch.Tensor]]:
            for o, row in zip(outs, results[0]):
                o.detach().copy_(from_wire(row, o).reshape(o.shape))
            return outputs

        return self._completer.work([h], finish)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                          opts: Any = None) -> Any:
        if output.numel() != input.numel() * self._comm.size:
            raise ConfigError(f"rank {self._comm.rank}: all_gather_into_tensor needs an output "
                              f"of {self._comm.size} x {input.numel()} elements, got "
                              f"{tuple(output.shape)}")
        h = self._comm.allgather_async(to_wire(input), **self._kw())

        def finish(results: list[Any]) -> list[torch.Tensor]:
            output.detach().copy_(from_wire(results[0], output).reshape(output.shape))
            return [output]

        return self._completer.work([h], finish)

    # torch's functional collectives (and DTensor, FSDP's C++ paths) reach a Python group
    # only through these coalesced entry points: one call per pair, in order.
    def all_gather_single_coalesced(self, outputs: list[torch.Tensor],
                                    inputs: list[torch.Tensor], opts: Any = None) -> Any:
        for o, i in zip(outputs, inputs, strict=True):
            self.all_gather_single(o, i, opts).wait()
        return completed(outputs)

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts: Any = None) -> Any:
        for o, i in zip(outputs, inputs, strict=True):
            self.reduce_scatter_single(o, i, opts)
        return completed(outputs)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],  # type: ignore[override]
               opts: Any) -> Any:
        src = inputs[0]
        rows = self._comm.allgather(to_wire(src), **self._kw())
        if self._comm.rank == opts.rootRank:
            self._sizes_equal("gather", outputs[0], src.numel())
            for o, row in zip(outputs[0], rows):
                o.detach().copy_(from_wire(row, o).reshape(o.shape))
        return completed(outputs)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],  # type: ignore[override]
                opts: Any) -> Any:
        out, root = outputs[0], opts.rootRank
        stacked = torch.empty((self._comm.size, out.numel()), dtype=out.dtype)
        if self._comm.rank == root:
            self._sizes_equal("scatter", inputs[0], out.numel())
            torch.stack([t.detach().reshape(-1).cpu() for t in inputs[0]], out=stacked)
        wire = to_wire(stacked)
        self._comm.broadcast(wire, root, **self._kw())
        out.detach().copy_(from_wire(wire, out)[self._comm.rank].reshape(out.shape))
        return completed(outputs)

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                 opts: Any = None) -> Any:
        n = self._comm.size
        if len(outputs) != n or len(inputs) != n:
            raise ConfigError(f"rank {self._comm.rank}: all_to_all needs {n} input and {n} "
                              f"output tensors, got {len(inputs)} and {len(outputs)}")
        got = self._alltoallv([to_wire(t).reshape(-1) for t in inputs], [o.numel() for o in outputs])
        for o, g in zip(outputs, got):
            o.detach().copy_(from_wire(g, o).reshape(o.shape))
        return completed(outputs)

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor,  # noqa: A002
                          output_split_sizes: list[int], input_split_sizes: list[int],
                          opts: Any = None) -> Any:
        n = self._comm.size
        if not output_split_sizes and not input_split_sizes:  # equal blocks: one exchange
            if input.numel() % n or input.numel() != output.numel():
                raise ConfigError(f"rank {self._comm.rank}: all_to_all_single with equal "
                                  f"splits needs input and output of the same size, a multiple "
                                  f"of {n}; got {tuple(input.shape)} and {tuple(output.shape)}")
            h = self._comm.alltoall_async(to_wire(input).reshape(n, -1), **self._kw())

            def finish(results: list[Any]) -> list[torch.Tensor]:
                output.detach().copy_(from_wire(results[0], output).reshape(output.shape))
                return [output]

            return self._completer.work([h], finish)
        ins = list(input_split_sizes) or [input.shape[0] // n] * n
        outs = list(output_split_sizes) or [output.shape[0] // n] * n
        row_in = input[0].numel() if input.dim() and input.shape[0] else 0
        row_out = output[0].numel() if output.dim() and output.shape[0] else 0
        flat = to_wire(input).reshape(-1)
        blocks = list(torch.split(flat, [k * row_in for k in ins]))
        got = self._alltoallv(blocks, [k * row_out for k in outs])
        output.detach().copy_(from_wire(torch.cat(got), output).reshape(output.shape))
        return completed([output])

    def _alltoallv(self, blocks: list[torch.Tensor], recv: list[int]) -> list[torch.Tensor]:
        """Blocks of any lengths: padded to the longest block of any rank, one exchange."""
        n = self._comm.size
        if len(blocks) != n or len(recv) != n:
            raise ConfigError(f"rank {self._comm.rank}: all_to_all needs {n} splits")
        longest = torch.tensor([max(b.numel() for b in blocks)], dtype=torch.int64)
        width = int(self._comm.allreduce(longest, "max", **self._kw())[0])
        buf = torch.zeros((n, width), dtype=blocks[0].dtype)
        for j, b in enumerate(blocks):
            buf[j, :b.numel()] = b
        got = self._comm.alltoall(buf, **self._kw())
        return [got[i, :recv[i]] for i in range(n)]

    def barrier(self, opts: Any = None) -> Any:
        try:
            self._comm.barrier(**self._kw())
        except PeerTimeout as e:
            raise p2p.torch_timeout(e, "barrier") from None
        return completed([])

    # -- point-to-point and the rest of torch's API (._pg_p2p) ------------------------------
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> Any:
        return self._p2p.send(tensors, dst, tag)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> Any:
        return self._p2p.recv(tensors, src, tag)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int) -> Any:
        return self._p2p.recv(tensors, None, tag)

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> Any:
        return p2p.monitored_barrier(self._comm, self._p2p, timeout, wait_all_ranks)

    def allgather_coalesced(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                            opts: Any = None) -> Any:
        return p2p.allgather_coalesced(self, outputs, inputs)
