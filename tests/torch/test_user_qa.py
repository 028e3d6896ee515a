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
