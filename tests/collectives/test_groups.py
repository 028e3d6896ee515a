"""The grouping rule of split, the allreduce registry, and split's arguments (one process)."""

from __future__ import annotations

import numpy as np
import pytest

import terascale
from terascale import ConfigError
from terascale.collectives import ALLREDUCE, ALLREDUCE_ALGORITHMS, allreduce_names
from terascale.collectives.groups import host_groups, split_groups


def test_split_groups_follow_mpi_comm_split() -> None:
    # colors by rank, keys reorder inside a color, None joins nothing
    groups = split_groups([1, 0, 1, None, 0, 1], [0, 5, -1, 0, 5, 0])
    assert groups == {1: [2, 0, 5], 0: [1, 4]}  # key, then rank; groups by lowest rank
    assert list(groups) == [1, 0]
    assert split_groups([None, None]) == {}
    assert split_groups(["b", "a", "b"]) == {"b": [0, 2], "a": [1]}
    assert host_groups(["x", "y", "x", "z", "y"]) == [[0, 2], [1, 4], [3]]


def test_registry_is_the_one_list() -> None:
    assert ALLREDUCE_ALGORITHMS == ("auto", *allreduce_names())
    for name, spec in ALLREDUCE.items():
        assert spec.name == name and hasattr(spec.load(), "for_call")
        assert spec.cost, f"{name} has no cost formula"  # every built-in one is priced
        if spec.fast_path == "swap":  # two ranks and a small message: the class says how
            assert spec.pair_pieces(8, 4) is not None, name
    # auto picks by role, and every role has exactly one algorithm
    roles = [s.auto for s in ALLREDUCE.values() if s.auto]
    assert sorted(roles) == sorted(["one host", "mixed hosts", "small", "large"])
    one_host = [s for s in ALLREDUCE.values() if s.placement == "one host"]
    assert one_host and all(not s.runs_on(2) and s.runs_on(1) for s in one_host)
    assert all(s.runs_on(64) for s in ALLREDUCE.values() if s.placement == "any")
    # what the hierarchical allreduce may run between hosts: every sub-group algorithm
    assert {s.auto for s in ALLREDUCE.values() if s.subgroup} >= {"small", "large"}


def test_split_of_a_single_process() -> None:
    with terascale.init() as comm:
        assert comm.split(None) is None and comm.split(-1) is None
        sub = comm.split(3, key=7)
        assert sub is not None and (sub.rank, sub.size) == (0, 1)
        assert sub.allreduce(np.arange(3)).tolist() == [0, 1, 2]
        assert sub.alltoall(np.arange(4)).tolist() == [0, 1, 2, 3]
        assert sub.allgather_async(np.int8(5)).wait().tolist() == [5]
        for bad in ("a", 1.5, True):
            with pytest.raises(ConfigError, match="split color"):
                comm.split(bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="split key"):
            comm.split(0, key="k")  # type: ignore[arg-type]
        sub.close()
        assert comm.allreduce(np.ones(2)).tolist() == [1.0, 1.0]  # the parent still works
        other = comm.split(0)
    assert other is not None
    with pytest.raises(ConfigError, match="closed communicator"):  # closed with its parent
        other.barrier()
