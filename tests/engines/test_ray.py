"""terascale.ray on a real local Ray cluster: a 2-actor job, a killed actor recovered."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.ray

ray = pytest.importorskip("ray")

import terascale  # noqa: E402
import terascale.ray  # noqa: E402
from terascale.engines.jobs import (  # noqa: E402
    Fault,
    allreduce_job,
    checkpointed_job,
    listening_job,
)


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_two_worker_allreduce():
    out = terascale.ray.run(allreduce_job, num_workers=2, args=(4096,))
    assert [o["rank"] for o in out] == [0, 1]
    assert all(o["size"] == 2 and o["sum"] == 3.0 and o["same"] for o in out)
    assert out[0]["job"] == out[1]["job"] and out[0]["pid"] != out[1]["pid"]


def test_rendezvous_listens_on_loopback_on_one_node_not_every_interface():
    out = terascale.ray.run(listening_job, num_workers=2)
    assert [o["rank"] for o in out] == [0, 1]
    for o in out:  # actor 0's server, seen from both actors' processes
        assert o["rendezvous"].startswith("127.0.0.1:"), o
        assert o["listening"] == ["127.0.0.1"], o


def test_killed_actor_restarts_group_from_checkpoint_bitwise(tmp_path):
    clean = terascale.ray.run(checkpointed_job, num_workers=2,
                              args=(str(tmp_path / "clean"), 6))
    assert [start for start, _ in clean] == [0, 0]
    fault = Fault(rank=1, step=3, marker=str(tmp_path / "fired"), kind="exit")  # SIGKILL
    resumed = terascale.ray.run(checkpointed_job, num_workers=2,
                                args=(str(tmp_path / "faulty"), 6),
                                kwargs={"fault": fault}, max_restarts=1)
    assert os.path.exists(fault.marker)
    assert [start for start, _ in resumed] == [3, 3]
    assert [w for _, w in resumed] == [w for _, w in clean]


def test_gives_up_after_max_restarts_and_checks_arguments():
    def always_fails() -> None:
        terascale.init()
        raise ValueError("bad input on purpose")

    with pytest.raises(terascale.TerascaleError, match="bad input on purpose"):
        terascale.ray.run(always_fails, num_workers=2, max_restarts=1)
    with pytest.raises(terascale.ConfigError, match="num_workers=3"):
        terascale.ray.run(allreduce_job, num_workers=3, timeout=2.0)
    with pytest.raises(terascale.ConfigError, match="max_restarts"):
        terascale.ray.run(allreduce_job, num_workers=2, max_restarts=-1)
