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

    with pytest.raises(terascale.TerascaleError,
                       match=r"failed 2 time\(s\); rank [01] failed first: ValueError: bad input "
                             r"on purpose"):
        terascale.ray.run(always_fails, num_workers=2, max_restarts=1)

    def config_error() -> None:  # the input's fault: raised as it is, not restarted
        raise terascale.ConfigError("bad option on purpose")

    with pytest.raises(terascale.ConfigError, match="bad option on purpose"):
        terascale.ray.run(config_error, num_workers=2, max_restarts=3)
    with pytest.raises(terascale.ConfigError, match="num_workers=3"):  # never placed: 2 CPUs
        terascale.ray.run(allreduce_job, num_workers=3, timeout=1.0)
    with pytest.raises(terascale.ConfigError, match="max_restarts"):
        terascale.ray.run(allreduce_job, num_workers=2, max_restarts=-1)


def test_resources_per_worker_are_reserved():
    """A custom resource the cluster lacks cannot be placed: a clear error, not a hang
    (at the placement deadline, which such a bundle always waits out: kept short)."""
    with pytest.raises(terascale.ConfigError, match="accelerator_x"):
        terascale.ray.run(allreduce_job, num_workers=1, args=(16,), timeout=1,
                          resources_per_worker={"accelerator_x": 1})
    out = terascale.ray.run(allreduce_job, num_workers=2, args=(16,),
                            resources_per_worker={"CPU": 0.5})
    assert [o["rank"] for o in out] == [0, 1]


def test_train_linear_on_a_ray_dataset(tmp_path):
    """Table columns (format="csv") and a column of VW lines, each actor streaming its
    own split; per-pass metrics on the driver; the model written to the storage path and
    equal to the one returned."""
    import numpy as np
    import pandas as pd

    from terascale.linear import LinearModel

    rng = np.random.default_rng(0)
    n = 600
    df = pd.DataFrame({"a": rng.standard_normal(n), "b": rng.standard_normal(n),
                       "c": rng.choice(["u", "v"], n)})
    df["y"] = ((df.a - df.b + (df.c == "u")) > 0).astype(float)
    seen = []
    model = terascale.ray.train_linear(ray.data.from_pandas(df).repartition(4),
                                       format="csv", label="y", passes=2, bits=12,
                                       storage_path=str(tmp_path / "run"),
                                       on_metrics=seen.append)
    info = model.info["ray"]
    assert sum(info["rows"]) == n and all(r > 0 for r in info["rows"])
    assert [m["pass"] for m in seen] == [1, 2] and seen[1]["loss"] < seen[0]["loss"]
    back = LinearModel.load(info["saved"])
    assert np.array_equal(back.dense(), model.dense())
    lines = ray.data.from_items([{"text": f"{1 if y else -1} |f a:{a} b:{b} {c}"}
                                 for a, b, c, y in zip(df.a, df.b, df.c, df.y)])
    vw = terascale.ray.train_linear(lines, passes=1, bits=12)
    assert sum(vw.info["ray"]["rows"]) == n and vw.info["examples"] == n


def test_train_linear_reports_metrics_while_the_job_runs():
    """Each pass's and L-BFGS iteration's metrics reach on_metrics on the driver before
    rank 0 has finished training (not replayed at the end), in order, as the model keeps
    them."""
    import time

    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(1)
    n = 20000
    x = rng.standard_normal((n, 8))
    df = pd.DataFrame(x, columns=[f"x{j}" for j in range(8)])
    df["y"] = (x @ rng.standard_normal(8) + rng.standard_normal(n) > 0).astype(float)
    got: list[tuple[float, dict]] = []
    model = terascale.ray.train_linear(
        ray.data.from_pandas(df).repartition(2), format="csv", label="y", bits=12,
        passes=3, bfgs=25, tol=1e-12, holdout=0,
        on_metrics=lambda m: got.append((time.time(), m)))
    info = model.info["ray"]
    assert [m for _, m in got] == info["metrics"]
    phases = [m["phase"] for _, m in got]
    assert phases[:3] == ["online"] * 3 and set(phases[3:]) == {"bfgs"}
    assert [m["pass"] for _, m in got] == sorted(m["pass"] for _, m in got)
    # the first pass's metrics were on the driver while training still had passes to go
    assert got[0][0] < info["finished"], (got[0][0], info["finished"], len(got))
    assert got[0][1]["time"] <= got[0][0]


def test_train_linear_with_an_actor_whose_split_is_empty():
    """One row for two actors: the actor whose split holds nothing takes part in every
    collective, and the model is one worker's on that row."""
    import numpy as np

    from terascale.linear import parse_lines, train

    line = "1 |a x y"
    model = terascale.ray.train_linear(ray.data.from_items([{"text": line}]), num_workers=2,
                                       bits=12)
    assert sorted(model.info["ray"]["rows"]) == [0, 1]
    assert np.array_equal(model.dense(), train(parse_lines([line], bits=12)).dense())


def test_train_linear_whose_blocks_never_come_fails_within_the_deadline():
    """Three actors of half a CPU on this two-CPU cluster leave no whole CPU to the Ray Data
    tasks that make their blocks: each actor waits for its first batch. That wait has the
    job's deadline too: a ConfigError naming the worker and what it waited for, not a job
    that never ends. (Last in the module: the unplaceable read tasks are left behind.)"""
    import time

    lines = ray.data.from_items([{"text": f"{1 if i % 2 else -1} |f a:{i % 7}"}
                                 for i in range(60)])
    began = time.monotonic()
    with pytest.raises(terascale.ConfigError, match=r"Ray worker \d: no batch of the "
                       r"Dataset arrived within 12 s"):
        terascale.ray.train_linear(lines, passes=1, num_workers=3, timeout=12)
    assert time.monotonic() - began < 60
