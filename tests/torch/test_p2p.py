"""Point-to-point and the rest of torch's ProcessGroup API on the "terascale" backend, each
against gloo on the same inputs in the same run (real worker processes)."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import pytest

from terascale.testing import run_workers

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32",
          "int64", "bool", "complex64", "complex128"]


def _pack(obj: Any) -> bytes:
    """Tensors back to the test as bytes (a worker's shared-memory tensors die with it)."""
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _unpack(data: bytes) -> Any:
    import io

    return torch.load(io.BytesIO(data))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _groups(comm: Any, port: int, timeout: float = 30.0) -> tuple[Any, Any]:
    import datetime

    import torch.distributed as dist

    import terascale.torch  # noqa: F401

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                            world_size=comm.size)
    t = datetime.timedelta(seconds=timeout)
    return dist.new_group(backend="terascale", timeout=t), dist.new_group(backend="gloo")


def _value(dtype: Any, r: int, n: int = 5) -> Any:
    base = torch.arange(n, dtype=torch.float64) * 3 - 4 + r
    if dtype == torch.bool:
        return (base.long() % 2).bool()
    if dtype.is_complex:
        return torch.complex(base, -base).to(dtype)
    if dtype == torch.uint8:
        return (base.abs() + 7).to(dtype)
    return base.to(dtype)


def _point_to_point(comm: Any, port: int) -> dict[str, Any]:
    import torch.distributed as dist

    ours, gloo = _groups(comm, port)
    r, n = comm.rank, comm.size
    out: dict[str, Any] = {}
    for label, g in (("terascale", ours), ("gloo", gloo)):
        res: dict[str, Any] = {}
        for name in DTYPES:  # blocking send/recv of every dtype, 0 -> 1
            dt = getattr(torch, name)
            if r == 0:
                dist.send(_value(dt, r), 1, group=g, tag=5)
            elif r == 1:
                got = torch.zeros(5, dtype=dt)
                dist.recv(got, 0, group=g, tag=5)
                res[name] = got
        # tags: two messages 0 -> 1, received in the opposite order by tag
        if r == 0:
            a, b = dist.isend(torch.tensor([1.0]), 1, group=g, tag=1), \
                dist.isend(torch.tensor([2.0]), 1, group=g, tag=2)
            a.wait()
            b.wait()
        elif r == 1:
            x2, x1 = torch.zeros(1), torch.zeros(1)
            w2 = dist.irecv(x2, 0, group=g, tag=2)
            w1 = dist.irecv(x1, 0, group=g, tag=1)
            w1.wait()
            w2.wait()
            res["tags"] = (x1.item(), x2.item())
        # any source: every other rank sends its rank to rank 0
        if r == 0:
            seen = {}
            for _ in range(n - 1):
                x = torch.zeros(2, dtype=torch.int64)
                src = dist.recv(x, group=g, tag=9)
                seen[src] = x.tolist()
            res["any"] = seen
        else:
            dist.send(torch.tensor([r, r * r]), 0, group=g, tag=9)
        # a non-contiguous tensor sent, into a strided one (gloo takes contiguous ones only)
        if g is ours and r == 1:
            dist.send(torch.arange(12.0).reshape(3, 4).t(), 0, group=g)
        elif g is ours and r == 0:
            y = torch.zeros(8, 3)[::2]
            dist.recv(y, 1, group=g)
            out["strided"] = y.clone()
        # batch_isend_irecv around a ring, both directions at once
        right, left = (r + 1) % n, (r - 1) % n
        to_l, from_r = torch.zeros(3), torch.zeros(3)
        ops = [dist.P2POp(dist.irecv, to_l, left, g, tag=4),
               dist.P2POp(dist.irecv, from_r, right, g, tag=3),
               dist.P2POp(dist.isend, torch.full((3,), float(r)), right, g, tag=4),
               dist.P2POp(dist.isend, torch.full((3,), r + 0.5), left, g, tag=3)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        res["ring"] = (to_l.clone(), from_r.clone())
        dist.barrier(group=g)
        out[label] = res
    return _pack(out)


def test_point_to_point_every_dtype_tags_any_source_batches_as_gloo() -> None:
    results = [_unpack(b) for b in run_workers(_point_to_point, 3, args=(free_port(),), timeout=120)]
    for rank, res in enumerate(results):
        ours, gloo = res["terascale"], res["gloo"]
        assert ours.keys() == gloo.keys(), rank
        assert len(ours) == {0: 2, 1: 2 + len(DTYPES), 2: 1}[rank], ours.keys()
        for k in ours:
            a, b = ours[k], gloo[k]
            if isinstance(a, torch.Tensor):
                assert a.dtype == b.dtype and torch.equal(a, b), (rank, k, a, b)
            elif isinstance(a, tuple) and isinstance(a[0], torch.Tensor):
                assert all(torch.equal(x, y) for x, y in zip(a, b)), (rank, k)
            else:
                assert a == b, (rank, k, a, b)
    assert torch.equal(results[0]["strided"], torch.arange(12.0).reshape(3, 4).t())
    assert results[1]["terascale"]["tags"] == (1.0, 2.0)
    assert results[0]["terascale"]["any"] == {1: [1, 1], 2: [2, 4]}
    assert torch.equal(results[1]["terascale"]["bfloat16"], _value(torch.bfloat16, 0))


def _more_collectives(comm: Any, port: int) -> dict[str, Any]:
    import torch.distributed as dist

    ours, gloo = _groups(comm, port)
    r, n = comm.rank, comm.size
    out: dict[str, Any] = {}
    for label, g in (("terascale", ours), ("gloo", gloo)):
        res: dict[str, Any] = {}
        for op in ("BAND", "BOR", "BXOR"):
            for dt in (torch.int32, torch.uint8, torch.int64):
                t = torch.tensor([0b1011 << r, 7 + r, 255 - r, 1], dtype=dt)
                dist.all_reduce(t, op=getattr(dist.ReduceOp, op), group=g)
                res[f"{op} {dt}"] = t
        outs = [[torch.zeros(2, 2), torch.zeros(3)] for _ in range(n)]
        dist.all_gather_coalesced(outs, [torch.full((2, 2), r + 0.25), torch.arange(3.0) * r],
                                  group=g)
        res["all_gather_coalesced"] = outs
        t = torch.tensor([r + 1.0, 2.0, -1.0])
        dist.all_reduce_coalesced([t, torch.ones(2) * r], group=g)
        res["all_reduce_coalesced"] = t
        i = torch.tensor([[r, 2, 0], [1, 1, r % 2]])
        sp = torch.sparse_coo_tensor(i, torch.tensor([1.5, -2.0, r + 0.5]), (4, 3))
        dist.all_reduce(sp, group=g)
        res["sparse"] = sp.to_dense()
        # what torch's suite gates to CUDA/NCCL: uneven all_to_all_single, the tensor forms
        ins = [k + 1 for k in range(n)]
        outs_n = [r + 1] * n
        x = torch.cat([torch.full((k, 2), 10.0 * r + j) for j, k in enumerate(ins)])
        y = torch.zeros(sum(outs_n), 2)
        dist.all_to_all_single(y, x, outs_n, ins, group=g)
        res["all_to_all_single uneven"] = y
        z = torch.zeros(n * 3)
        dist.all_gather_into_tensor(z, torch.arange(3.0) + r, group=g)
        res["all_gather_into_tensor"] = z
        rs = torch.zeros(2)
        dist.reduce_scatter_tensor(rs, torch.arange(2.0 * n) * (r + 1), group=g)
        res["reduce_scatter_tensor"] = rs
        out[label] = res
    return _pack(out)


def test_bitwise_coalesced_sparse_alltoall_and_tensor_forms_as_gloo() -> None:
    results = [_unpack(b) for b in run_workers(_more_collectives, 3, args=(free_port(),), timeout=120)]
    for rank, res in enumerate(results):
        ours, gloo = res["terascale"], res["gloo"]
        for k in gloo:
            a, b = ours[k], gloo[k]
            if isinstance(b, list):
                a = torch.cat([torch.cat([x.reshape(-1) for x in row]) for row in a])
                b = torch.cat([torch.cat([x.reshape(-1) for x in row]) for row in b])
            assert a.dtype == b.dtype and torch.equal(a, b), (rank, k, a, b)


def _failures(comm: Any, port: int) -> Any:
    import torch.distributed as dist

    from terascale import PeerLost, PeerTimeout

    ours, _ = _groups(comm, port, timeout=2.0)
    r = comm.rank
    if r == 0:  # nobody sends on tag 77: the deadline, worded as torch's
        t0 = time.monotonic()
        with pytest.raises(PeerTimeout) as e:
            dist.recv(torch.zeros(3), 1, group=ours, tag=77)
        took = time.monotonic() - t0
        assert isinstance(e.value, RuntimeError)
        assert "Timed out" in str(e.value) and "rank 0" in str(e.value), e.value
        assert "peer 1" in str(e.value) and "recv" in str(e.value), e.value
        assert (e.value.rank, e.value.peer) == (0, 1)
        assert 1.5 < took < 6, took
        # the wrong size is an error naming both ranks, not a hang or a short read
        with pytest.raises(Exception, match="expected 8 bytes, peer 1 sent 12"):
            dist.recv(torch.zeros(2), 1, group=ours, tag=5)
        # a monitored barrier names the rank that did not arrive
        with pytest.raises(RuntimeError, match="Rank 2 failed to pass monitoredBarrier"):
            ours.monitored_barrier(__import__("datetime").timedelta(seconds=1))
        # rank 2 then dies: a receive from it fails at once, naming it
        dist.barrier(group=_)
        t0 = time.monotonic()
        with pytest.raises(PeerLost) as lost:
            dist.recv(torch.zeros(1), 2, group=ours, tag=8)
        assert lost.value.peer == 2 and time.monotonic() - t0 < 1.9, lost.value
        return "ok"
    if r == 1:
        dist.send(torch.zeros(3), 0, group=ours, tag=5)
        with pytest.raises(RuntimeError, match="received errors while waiting"):
            ours.monitored_barrier(__import__("datetime").timedelta(seconds=1))
        dist.barrier(group=_)
        return "ok"
    time.sleep(1.5)  # misses the monitored barrier
    dist.barrier(group=_)
    dist.send(torch.zeros(2), 0, group=ours, tag=1)  # opens the link, then dies
    import os
    os._exit(3)


def test_point_to_point_deadline_mismatch_monitored_barrier_and_lost_peer() -> None:
    out = run_workers(_failures, 3, args=(free_port(),), timeout=90, expect_failure=True)
    assert out[0] == ("ok", "ok"), out[0]
    assert out[1] == ("ok", "ok"), out[1]


@pytest.mark.skipif(os.environ.get("TERASCALE_TORCH_FULL") != "1",
                    reason="the bench's torchrun jobs (its p2p code is the tests' above): "
                           "TERASCALE_TORCH_FULL=1 (make test-torch)")
def test_bench_torch_p2p_reports_both_backends(tmp_path: Any) -> None:
    # `terascale bench torch --parts p2p`: a ping-pong on terascale and on gloo under torchrun
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "p2p.json"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    run = subprocess.run([sys.executable, "-m", "terascale", "bench", "torch", "--parts", "p2p",
                          "--p2p-sizes", "4096,65536", "--p2p-rounds", "8", "--json", str(out)],
                         capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    rows = json.loads(out.read_text())["p2p"]
    assert [r["bytes"] for r in rows] == [4096, 65536]
    for r in rows:
        assert r["terascale_s"] > 0 and r["gloo_s"] > 0
        assert abs(r["ratio"] - r["terascale_s"] / r["gloo_s"]) < 1e-12
    assert "| 4096 B |" in run.stdout
