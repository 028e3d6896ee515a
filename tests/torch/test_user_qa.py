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


def _wait_for_one_second(work: object) -> tuple[str, float, str]:
    """``work.wait(timeout=1 s)``: what it raised (its kind, and whether it is also a
    RuntimeError), how long it waited and its message."""
    import time

    began = time.monotonic()
    try:
        work.wait(timeout=datetime.timedelta(seconds=1))  # type: ignore[attr-defined]
    except Exception as e:  # noqa: BLE001 (the type is what the test checks)
        kind = "PeerTimeout" if isinstance(e, terascale.PeerTimeout) else type(e).__name__
        return (kind + (" RuntimeError" if isinstance(e, RuntimeError) else ""),
                time.monotonic() - began, str(e))
    return ("no error", time.monotonic() - began, "")


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
    first = _wait_for_one_second(work)
    work.wait()  # the collective itself goes on, and completes once rank 1 is there
    return first


def test_work_wait_with_a_timeout_ends_by_it() -> None:
    """``work.wait(timeout=)`` stops waiting after ``timeout``, as on gloo, with a
    PeerTimeout naming the rank that is also the RuntimeError gloo code catches; the
    group's own deadline is longer."""
    from terascale.testing import run_workers

    kind, waited, text = run_workers(_timed_wait, 2, args=(_free_port(),), timeout=60)[0]
    assert kind == "PeerTimeout RuntimeError", (kind, waited, text)
    assert 0.9 < waited < 3.0, waited
    assert text.startswith("rank 0: ") and "1 s" in text, text


def _timed_recv(comm: object, port: int) -> tuple[str, float, str, list[float]]:
    import time

    rank = comm.rank  # type: ignore[attr-defined]
    dist.init_process_group("terascale", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=30))
    if rank == 1:  # sends late: rank 0's wait(timeout=) runs out first
        time.sleep(3.0)
        dist.send(torch.arange(4.0) + 7, dst=0)
        return ("sent", 0.0, "", [])
    got = torch.zeros(4)
    work = dist.irecv(got, src=1)
    first = _wait_for_one_second(work)
    work.wait()  # the receive stays posted, and completes once rank 1 sends
    return (*first, got.tolist())


def test_irecv_wait_with_a_timeout_ends_by_it() -> None:
    """``irecv(...).wait(timeout=)`` stops waiting after ``timeout`` with a PeerTimeout
    naming rank and peer that is also a RuntimeError (as gloo's); the receive stays
    posted, and a later ``wait()`` gets the message."""
    from terascale.testing import run_workers

    kind, waited, text, got = run_workers(_timed_recv, 2, args=(_free_port(),),
                                          timeout=60)[0]
    assert kind == "PeerTimeout RuntimeError", (kind, waited, text)
    assert 0.9 < waited < 2.5, waited
    assert "rank 0" in text and "peer 1" in text and "1 s" in text, text
    assert got == [7.0, 8.0, 9.0, 10.0]


def _views_and_dtypes(comm: object, port: int) -> dict[str, object]:
    rank = comm.rank  # type: ignore[attr-defined]
    dist.init_process_group("terascale", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=30))
    out: dict[str, torch.Tensor] = {}
    base = torch.arange(24.0).reshape(4, 6) + rank
    dist.all_reduce(base[:, ::2])  # a strided view: only its elements change
    out["all_reduce view"] = base
    base = torch.arange(24.0).reshape(4, 6) + rank
    dist.broadcast(base[:, 1], src=1)
    out["broadcast view"] = base
    big = torch.zeros(2, 5, 2)
    dist.all_gather([big[i, :, 0] for i in range(2)], torch.arange(5.0) + 10 * rank)
    out["all_gather into views"] = big
    for dtype in (torch.complex64, torch.complex128, torch.int16, torch.bool):
        t = torch.tensor([1, 2, 3]) + rank
        t = (t % 2 == 0) if dtype == torch.bool else t.to(dtype) * (1 - 1j if dtype.is_complex
                                                                     else 1)
        dist.all_reduce(t, op=dist.ReduceOp.MAX if dtype == torch.bool else dist.ReduceOp.SUM)
        out[str(dtype)] = t
    dist.destroy_process_group()
    # tensors leave the worker as bytes (a tensor pickled across processes shares memory
    # with a process that is gone by then)
    return {k: (t.dtype, tuple(t.shape), t.numpy().tobytes()) for k, t in out.items()}


def _tensor(sent: tuple[object, tuple[int, ...], bytes]) -> object:
    dtype, shape, data = sent
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)  # type: ignore[arg-type]


def test_views_and_uncommon_dtypes_reduce_in_place() -> None:
    """In-place collectives on strided views write the view's elements and nothing else of
    their base (gloo writes the base's first elements instead), and complex, int16 and bool
    tensors reduce (gloo refuses int16)."""
    from terascale.testing import run_workers

    results = run_workers(_views_and_dtypes, 2, args=(_free_port(),), timeout=60)
    for rank, sent in enumerate(results):
        got = {k: _tensor(v) for k, v in sent.items()}
        mine = torch.arange(24.0).reshape(4, 6) + rank
        want = mine.clone()
        want[:, ::2] = 2 * torch.arange(24.0).reshape(4, 6)[:, ::2] + 1
        assert torch.equal(got["all_reduce view"], want), rank
        want = mine.clone()
        want[:, 1] = torch.arange(24.0).reshape(4, 6)[:, 1] + 1
        assert torch.equal(got["broadcast view"], want), rank
        want = torch.zeros(2, 5, 2)
        want[:, :, 0] = torch.stack([torch.arange(5.0), torch.arange(5.0) + 10])
        assert torch.equal(got["all_gather into views"], want), rank
        for dtype in (torch.complex64, torch.complex128):
            assert torch.equal(got[str(dtype)],
                               torch.tensor([3, 5, 7]).to(dtype) * (1 - 1j)), (rank, dtype)
        assert torch.equal(got["torch.int16"], torch.tensor([3, 5, 7], dtype=torch.int16))
        assert torch.equal(got["torch.bool"], torch.tensor([True, True, True]))


def _destroy_early(comm: object, port: int) -> str:
    import time

    rank = comm.rank  # type: ignore[attr-defined]
    dist.init_process_group("terascale", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=30))
    dist.all_reduce(torch.ones(2))
    if rank == 1:  # leaves the group while rank 0 goes on; its process stays
        dist.destroy_process_group()
        time.sleep(3.0)
        return "left"
    try:
        dist.all_reduce(torch.ones(2))
    except terascale.PeerLost as e:
        return str(e)
    return "no error"


def test_a_peer_that_destroys_its_group_is_not_said_to_have_exited() -> None:
    """A rank that calls destroy_process_group while its peer is in a collective: the peer
    gets PeerLost at once, naming the rank, and the message does not claim that rank's
    process ended (it is still running)."""
    from terascale.testing import run_workers

    text = run_workers(_destroy_early, 2, args=(_free_port(),), timeout=60)[0]
    assert "lost peer rank 1" in text, text
    assert "closed its communicator" in text, text
