"""When the "terascale" backend's results are bit for bit gloo's, and what they are otherwise.

The claim the torch backend guide makes, tested against gloo in the same test:

* two ranks: every reduction of every dtype equals gloo's bit for bit (one operation per
  element: the order cannot differ; bfloat16's float32 sum of two values is exact, so the
  one rounding equals gloo's);
* three or more ranks on one host: integer reductions, MIN/MAX and all data movement are
  gloo's bits; floating-point sums are the sum in rank order (``x0 + x1 + x2``), in the
  tensor's dtype -- deterministic and the same on every rank -- where gloo's ring starts each
  chunk at another rank, so the last bits can differ from gloo's; bfloat16 is summed in
  float32 and rounded once (correctly rounded where gloo rounds after every addition).
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

DTYPES = ["float32", "float64", "bfloat16", "int64"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _inputs(rank: int, dtype: str) -> Any:
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(4099, generator=g, dtype=torch.float64) * 10 ** (rank % 3)
    return (x * 1000).round().to(torch.int64) if dtype == "int64" else x.to(getattr(torch,
                                                                                   dtype))


def _reduce(comm: Any, port: int, backend: str) -> dict[str, Any]:
    import torch.distributed as dist

    import terascale.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                            world_size=comm.size)
    out = {}
    for dtype in DTYPES:
        for op in ("SUM", "MAX"):
            t = _inputs(comm.rank, dtype)
            dist.all_reduce(t, getattr(dist.ReduceOp, op))
            out[f"{op} {dtype}"] = t.view(torch.int16 if dtype == "bfloat16" else t.dtype)
    rows = [torch.empty(5, dtype=torch.float64) for _ in range(comm.size)]
    dist.all_gather(rows, torch.randn(5, dtype=torch.float64))
    out["all_gather"] = torch.stack(rows)
    dist.destroy_process_group()
    return {k: v.numpy().tobytes() for k, v in out.items()}


def _run(n: int, backend: str) -> list[dict[str, bytes]]:
    from terascale.testing import run_workers

    return run_workers(_reduce, n, args=(_free_port(), backend), timeout=180)


def test_two_ranks_are_gloo_bit_for_bit() -> None:
    ours, gloo = _run(2, "terascale"), _run(2, "gloo")
    assert ours[0] == ours[1]
    for key in ours[0]:
        if key != "all_gather":  # random inputs of their own
            assert ours[0][key] == gloo[0][key], key


def test_three_ranks_sum_in_rank_order_and_move_data_as_gloo() -> None:
    import numpy as np

    ours, gloo = _run(3, "terascale"), _run(3, "gloo")
    assert ours[0] == ours[1] == ours[2]  # the same bits on every rank
    for dtype in DTYPES:
        assert ours[0][f"MAX {dtype}"] == gloo[0][f"MAX {dtype}"], dtype
    assert ours[0]["SUM int64"] == gloo[0]["SUM int64"]
    x = [_inputs(r, "float64") for r in range(3)]
    for dtype in ("float32", "float64"):
        xs = [t.to(getattr(torch, dtype)) for t in x]
        in_order = ((xs[0] + xs[1]) + xs[2]).numpy().tobytes()
        assert ours[0][f"SUM {dtype}"] == in_order, dtype
        a = np.frombuffer(ours[0][f"SUM {dtype}"], dtype=dtype)
        b = np.frombuffer(gloo[0][f"SUM {dtype}"], dtype=dtype)
        eps = np.finfo(dtype).eps
        bound = 3 * eps * sum(np.abs(t.numpy().astype(dtype)) for t in xs)
        assert np.all(np.abs(a - b) <= bound), dtype  # a rounding apart, at most
    xs = [_inputs(r, "bfloat16") for r in range(3)]
    rounded_once = sum(t.float() for t in xs).bfloat16().view(torch.int16)  # type: ignore[union-attr]
    assert ours[0]["SUM bfloat16"] == rounded_once.numpy().tobytes()
    ours_f = np.frombuffer(ours[0]["SUM float32"], dtype="float32")
    gloo_f = np.frombuffer(gloo[0]["SUM float32"], dtype="float32")
    print(f"3 ranks, float32 SUM: {int(np.sum(ours_f != gloo_f))} of {ours_f.size} elements "
          f"differ from gloo's, by at most {float(np.max(np.abs(ours_f - gloo_f))):.3g}")
