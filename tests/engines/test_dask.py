"""terascale.dask on a real dask.distributed LocalCluster (two worker processes, started
once for the module): results by rank, a raising task named and every rank stopped, a
killed worker process recovered bitwise, train_linear equal to workers reading files."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

pytestmark = pytest.mark.dask

distributed = pytest.importorskip("distributed")
dd = pytest.importorskip("dask.dataframe")
pd = pytest.importorskip("pandas")

import terascale  # noqa: E402
import terascale.dask  # noqa: E402
from terascale.engines.jobs import (  # noqa: E402
    Fault,
    allreduce_job,
    checkpointed_job,
    listening_job,
)
from terascale.launch.runner import JobFailed  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=50)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def test_two_worker_allreduce_and_loopback_rendezvous():
    out = terascale.dask.run(allreduce_job, num_workers=2, args=(4096,))
    assert [o["rank"] for o in out] == [0, 1]
    assert all(o["size"] == 2 and o["sum"] == 3.0 and o["same"] for o in out)
    assert out[0]["job"] == out[1]["job"] and out[0]["pid"] != out[1]["pid"]
    for o in terascale.dask.run(listening_job, num_workers=2):  # worker 0 serves, loopback
        assert o["rendezvous"].startswith("127.0.0.1:") and o["listening"] == ["127.0.0.1"]


def _raises_on_rank_1() -> None:
    comm = terascale.init()  # not closed on purpose: rank 0 hears nothing from rank 1
    if comm.rank == 1:
        raise ValueError("bad input on purpose")
    comm.barrier()  # rank 0 would wait here until its deadline


def test_a_raising_task_is_named_and_every_rank_is_stopped_at_once(client):
    """Through a client whose shared view of the cluster is refreshed without its workers
    every few milliseconds (distributed does so every two seconds): a rank's liveness check
    must not read that view, or a live worker passes for a lost one and takes the blame."""
    import dask

    from terascale.engines.dask import _members

    with dask.config.set({"distributed.client.scheduler-info-interval": "2ms"}):
        busy = distributed.Client(client.scheduler.address, set_as_default=False)
    try:
        live = _members(client)
        assert len(live) == 2 and all(_members(busy) == live for _ in range(200))
        t = time.monotonic()
        with pytest.raises(JobFailed, match=r"rank 1 failed first: ValueError: bad input on "
                                            r"purpose") as e:
            terascale.dask.run(_raises_on_rank_1, num_workers=2, max_restarts=0, timeout=60,
                               client=busy)
        assert time.monotonic() - t < 30, "rank 0 was left to its 60 s deadline"
        assert isinstance(e.value, terascale.TerascaleError)
        assert isinstance(e.value.__cause__, ValueError)
        # the stopped worker was restarted by its nanny: the cluster still runs jobs
        assert [o["sum"] for o in terascale.dask.run(allreduce_job, num_workers=2,
                                                      client=busy)] == [3.0, 3.0]
    finally:
        busy.close()


def test_killed_worker_restarts_group_from_checkpoint_bitwise(tmp_path):
    clean = terascale.dask.run(checkpointed_job, num_workers=2, args=(str(tmp_path / "a"), 6))
    assert [start for start, _ in clean] == [0, 0]
    fault = Fault(rank=1, step=3, marker=str(tmp_path / "fired"), kind="exit")  # SIGKILL
    resumed = terascale.dask.run(checkpointed_job, num_workers=2,
                                 args=(str(tmp_path / "b"), 6), kwargs={"fault": fault},
                                 max_restarts=1)
    assert os.path.exists(fault.marker)
    assert [start for start, _ in resumed] == [3, 3]
    assert [w for _, w in resumed] == [w for _, w in clean]


def test_a_killed_worker_is_named_when_restarts_run_out(tmp_path):
    fault = Fault(rank=0, step=2, marker=str(tmp_path / "fired"), kind="exit")
    with pytest.raises(JobFailed, match=r"rank 0 failed first: WorkerLost: a worker died"):
        terascale.dask.run(checkpointed_job, num_workers=2, args=(str(tmp_path / "c"), 4),
                           kwargs={"fault": fault}, max_restarts=0)


def test_bad_arguments():
    with pytest.raises(terascale.ConfigError, match=r"num_workers=3 exceeds the [12] Dask workers"):
        terascale.dask.run(allreduce_job, num_workers=3, timeout=1.0)
    with pytest.raises(terascale.ConfigError, match="max_restarts"):
        terascale.dask.run(allreduce_job, num_workers=2, max_restarts=-1)
    with pytest.raises(terascale.ConfigError, match="num_workers=0"):
        terascale.dask.run(allreduce_job, num_workers=0)


def _shards(frame, parts: int, workers: int) -> list:
    """The rows rank r reads: partitions r, r + workers, ... in order."""
    pieces = np.array_split(np.arange(len(frame)), parts)
    return [pd.concat([frame.iloc[pieces[p]] for p in range(r, parts, workers)])
            for r in range(workers)]


def test_train_linear_equals_workers_reading_the_same_partitions(tmp_path):
    """A column of VW lines and table columns (hashed as the CSV reader hashes a file):
    bitwise the models of terascale workers given the same partitions as files."""
    from terascale.linear import parse_lines, train
    from terascale.linear.synthetic import separable_lines
    from terascale.testing import run_workers

    opts = {"passes": 2, "bfgs": 5, "holdout": 0.0}
    lines = pd.DataFrame({"value": separable_lines(900, 3, vocab=40, k=6, scale=2.0,
                                                   prefix="w")})
    ddf = dd.from_pandas(lines, npartitions=4, sort=False)
    assert [len(p) for p in ddf.partitions] == [len(x) for x in np.array_split(lines, 4)]
    seen = []
    model = terascale.dask.train_linear(ddf, bits=14, on_metrics=seen.append,
                                        storage_path=str(tmp_path / "run"), **opts)
    rng = np.random.default_rng(7)
    table = pd.DataFrame({"a": rng.standard_normal(400), "b": rng.integers(0, 5, 400),
                          "city": rng.choice(["paris", "rome", "oslo"], 400)})
    table.insert(0, "y", ((table.a + (table.city == "rome") - 0.3 * table.b) > 0).astype(int))
    tab = terascale.dask.train_linear(dd.from_pandas(table, npartitions=4, sort=False),
                                      format="csv", label="y", bits=12, passes=2)
    files = []
    for r, (vw, rows) in enumerate(zip(_shards(lines, 4, 2), _shards(table, 4, 2))):
        files.append((str(tmp_path / f"part-{r}.vw"), str(tmp_path / f"part-{r}.csv")))
        with open(files[-1][0], "w") as f:
            f.write("".join(f"{line}\n" for line in vw["value"]))
        with open(files[-1][1], "w") as f:  # str(float) reads back to the same float
            f.write("y,a,b,city\n" + "".join(f"{y},{float(a)},{int(b)},{c}\n"
                                             for y, a, b, c in rows.itertuples(index=False)))

    def local(comm):
        vw, csv = (open(f).read().splitlines() for f in files[comm.rank])
        return (train(parse_lines(vw, bits=14), comm=comm, **opts).dense(),
                train(parse_lines(csv, format="csv", label="y", bits=12), comm=comm,
                      passes=2).dense())

    (vw0, csv0), _ = run_workers(local, 2, timeout=120)
    assert np.array_equal(model.dense(), vw0)  # the same models, bitwise
    assert np.array_equal(tab.dense(), csv0)
    assert model.info["dask"]["rows"] == [len(s) for s in _shards(lines, 4, 2)]
    assert [m["pass"] for m in seen][:2] == [1, 2]
    assert os.path.exists(model.info["dask"]["saved"])


def test_train_linear_bad_input_is_named():
    table = pd.DataFrame({"y": [0, 1] * 10, "a": np.arange(20.0)})
    ddf = dd.from_pandas(table, npartitions=2, sort=False)
    with pytest.raises(terascale.ConfigError, match="label='z'"):
        terascale.dask.train_linear(ddf, format="csv", label="z")
    with pytest.raises(terascale.DataError, match="no rows"):
        terascale.dask.train_linear(ddf[ddf.a > 100], format="csv", label="y")
    with pytest.raises(terascale.ConfigError, match="dask DataFrame, not DataFrame"):
        terascale.dask.train_linear(table, format="csv", label="y")


def test_train_linear_with_a_rank_that_has_no_partition():
    """One row in one partition for two ranks: the rank without a partition takes part in
    every collective, and the model is one worker's on that row."""
    from terascale.linear import parse_lines, train

    line = "1 |a x y"
    ddf = dd.from_pandas(pd.DataFrame({"value": [line]}), npartitions=1, sort=False)
    model = terascale.dask.train_linear(ddf, num_workers=2, bits=12)
    assert model.info["dask"]["rows"] == [1, 0]
    assert np.array_equal(model.dense(), train(parse_lines([line], bits=12)).dense())
