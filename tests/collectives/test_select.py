"""``algorithm="auto"``: same choice on every rank, from the host layout and size."""

from __future__ import annotations

import numpy as np

from terascale.collectives.select import choose_allreduce, choose_tcp
from terascale.testing import run_workers


def test_choice_by_layout() -> None:
    assert choose_allreduce(4096, 4, ["h"] * 4) == "shm"
    assert choose_allreduce(1 << 30, 2, ["h", "h"]) == "shm"
    assert choose_allreduce(4096, 4, ["a", "b", "a", "b"]) == "hierarchical"
    assert choose_allreduce(1 << 24, 3, ["a", "a", "b"]) == "hierarchical"
    assert choose_allreduce(1 << 24, 3, ["a", "b", "c"]) == choose_tcp(1 << 24, 3)
    assert choose_allreduce(100, 1, ["a"]) == choose_tcp(100, 1)


def test_auto_runs_shm_on_one_host_and_agrees() -> None:
    def fn(comm):
        x = np.arange(70_000, dtype=np.float32) * (comm.rank + 1)
        y = comm.allreduce(x)
        sent = comm.bytes_sent
        z = comm.allreduce(x)  # shm after set-up: nothing on the wire
        return y, z, comm.bytes_sent - sent

    res = run_workers(fn, 3)
    expect = np.arange(70_000, dtype=np.float32) * 6
    for y, z, sent in res:
        np.testing.assert_array_equal(y, expect)
        assert y.tobytes() == z.tobytes() == res[0][0].tobytes()
        assert sent == 0
