"""A user's pass over the "terascale" backend: what gloo code meets that the other test
files do not, each in a real group (one process where one rank shows it)."""

from __future__ import annotations

import datetime

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.torch

import terascale  # noqa: E402
import terascale.torch  # noqa: E402,F401  (registers the backend)


@pytest.fixture
def group_of_one():  # type: ignore[no-untyped-def]
    dist.init_process_group("terascale", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("op", ["BAND", "BOR", "BXOR"])
def test_a_bitwise_op_on_floats_names_the_op(group_of_one: None, op: str) -> None:
    with pytest.raises(terascale.ConfigError, match=rf"rank 0: ReduceOp\.{op} needs an integer "
                       r"or bool tensor, not torch\.float32$"):
        dist.all_reduce(torch.ones(3), op=getattr(dist.ReduceOp, op))


def test_an_op_the_backend_lacks_is_named(group_of_one: None) -> None:
    op = dist._make_nccl_premul_sum(2.0)
    with pytest.raises((terascale.ConfigError, RuntimeError, ValueError)) as e:
        dist.all_reduce(torch.ones(3), op=op)
    assert "object at 0x" not in str(e.value)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _timed_wait(comm: object, port: int) -> tuple[str, float, str]:
    import time

    rank = comm.rank  # type: ignore[attr-defined]
    dist.init_process_group("terascale", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=30))
    if rank == 1:  # late to the collective: rank 0 stops waiting first
        time.sleep(4.0)
        dist.all_reduce(torch.ones(4))
        return ("late", 0.0, "")
    work = dist.all_reduce(torch.ones(4), async_op=True)
    began = time.monotonic()
    try:
        work.wait(timeout=datetime.timedelta(seconds=1))
    except Exception as e:  # noqa: BLE001 (the type is what the test checks)
        first = (type(e).__name__, time.monotonic() - began, str(e))
    else:
        first = ("no error", time.monotonic() - began, "")
    work.wait()  # the collective itself goes on, and completes once rank 1 is there
    return first


def test_work_wait_with_a_timeout_ends_by_it() -> None:
    """``work.wait(timeout=)`` stops waiting after ``timeout``, as on gloo, with a
    PeerTimeout naming the rank; the group's own deadline is longer."""
    from terascale.testing import run_workers

    kind, waited, text = run_workers(_timed_wait, 2, args=(_free_port(),), timeout=60)[0]
    assert kind == "PeerTimeout", (kind, waited, text)
    assert 0.9 < waited < 3.0, waited
    assert text.startswith("rank 0: ") and "1 s" in text, text
