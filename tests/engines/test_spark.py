"""terascale.spark on a real local Spark (local[2]): barrier jobs, restart from checkpoints."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.spark
full = pytest.mark.skipif(os.environ.get("TERASCALE_SPARK_FULL", "") in ("", "0"),
                          reason="make test-engines (TERASCALE_SPARK_FULL=1)")

pyspark = pytest.importorskip("pyspark")

from _segments import job_segments  # noqa: E402

import terascale  # noqa: E402
import terascale.spark  # noqa: E402
from terascale.engines.jobs import Fault, allreduce_job, checkpointed_job  # noqa: E402


@pytest.fixture
def spark(spark_sessions):  # one session per master: see conftest.py
    return spark_sessions.get("local[2]")


def test_two_worker_allreduce(spark):
    out = terascale.spark.run(allreduce_job, num_workers=2, args=(4096,), spark=spark)
    assert [o["rank"] for o in out] == [0, 1]
    assert all(o["size"] == 2 and o["sum"] == 3.0 and o["same"] for o in out)
    assert out[0]["job"] == out[1]["job"]
    assert out[0]["pid"] != out[1]["pid"]  # two Python workers, our TCP mesh between them


def test_task_exception_reruns_stage_and_resumes_bitwise(spark, tmp_path):
    clean = terascale.spark.run(checkpointed_job, num_workers=2,
                                args=(str(tmp_path / "clean"), 6), spark=spark)
    assert [start for start, _ in clean] == [0, 0]
    assert clean[0][1] == clean[1][1]
    fault = Fault(rank=1, step=3, marker=str(tmp_path / "fired"), kind="raise")
    resumed = terascale.spark.run(checkpointed_job, num_workers=2,
                                  args=(str(tmp_path / "faulty"), 6),
                                  kwargs={"fault": fault}, spark=spark)
    assert os.path.exists(fault.marker)  # the failure did happen
    assert [start for start, _ in resumed] == [3, 3]  # the rerun resumed from step 3
    assert [w for _, w in resumed] == [w for _, w in clean]  # bitwise the same model


def test_worker_process_death_is_recovered(spark, tmp_path):
    record = str(tmp_path / "jobs")

    def _recorded(directory, steps, fault):  # nested: pickled by value
        with open(record, "a") as f:  # this attempt's job id, as the runner set it
            f.write(os.environ["TERASCALE_JOB"] + "\n")
        return checkpointed_job(directory, steps, fault=fault)

    fault = Fault(rank=0, step=2, marker=str(tmp_path / "fired"), kind="exit")
    out = terascale.spark.run(_recorded, num_workers=2, args=(str(tmp_path / "c"), 4, fault),
                              spark=spark)
    assert os.path.exists(fault.marker)
    assert [start for start, _ in out] == [2, 2]
    jobs = set(open(record).read().split())
    assert len(jobs) == 2  # the SIGKILLed attempt and the one that resumed
    assert job_segments(*jobs) == []  # the SIGKILLed attempt's segments were removed


def test_persistent_failure_is_reported(spark):
    def _always_fails() -> None:  # nested: pickled by value (tests/ is not importable there)
        terascale.init()
        raise ValueError("bad input on purpose")

    with pytest.raises(terascale.TerascaleError, match="bad input on purpose"):
        terascale.spark.run(_always_fails, num_workers=2, spark=spark)


def test_a_killed_worker_is_named(spark):
    def _dies() -> None:  # every attempt's rank 1 process is killed
        comm = terascale.init()
        if comm.rank == 1:
            os._exit(3)
        comm.allreduce(np.ones(4), timeout=60)

    with pytest.raises(terascale.TerascaleError, match=r"a worker died: task 1 \(rank 1\)"):
        terascale.spark.run(_dies, num_workers=2, spark=spark, timeout=20)


def test_bad_arguments(spark):
    with pytest.raises(terascale.ConfigError, match="num_workers=3"):
        terascale.spark.run(allreduce_job, num_workers=3, spark=spark)
    with pytest.raises(terascale.ConfigError, match="num_workers"):
        terascale.spark.run(allreduce_job, num_workers=0, spark=spark)


def _vw_lines(n: int, seed: int) -> list[str]:
    from terascale.linear.synthetic import separable_lines

    return separable_lines(n, seed, vocab=40, k=6, scale=2.0, prefix="w")


@full
def test_train_linear_on_partitions_equals_local_workers(spark, tmp_path):
    from terascale.linear import parse_lines, train
    from terascale.testing import run_workers

    opts = {"bits": 14, "passes": 2, "bfgs": 5, "holdout": 0.0}
    rdd = spark.sparkContext.parallelize(_vw_lines(1200, seed=3), 2)
    shards = rdd.glom().collect()  # exactly the lines of each partition, in order
    df = spark.createDataFrame(rdd.map(lambda line: (line,)), ["value"])
    model = terascale.spark.train_linear(df, spark=spark, **opts)

    local = run_workers(lambda comm: train(parse_lines(shards[comm.rank], bits=14), comm=comm,
                                           **{k: v for k, v in opts.items() if k != "bits"}
                                           ).dense(), 2, timeout=120)
    assert np.array_equal(model.dense(), local[0])  # the same model, bitwise
    assert model.evaluate(parse_lines(sum(shards, []), bits=14))["accuracy"] > 0.8

    files = []
    for k, shard in enumerate(shards):  # the same shards as files, read by the tasks
        files.append(str(tmp_path / f"part-{k}.vw"))
        with open(files[-1], "w") as f:
            f.write("\n".join(shard) + "\n")
    from_files = terascale.spark.train_linear(files, spark=spark, cache_dir=str(tmp_path / "c"),
                                              **opts)
    assert np.array_equal(from_files.dense(), local[0])


def test_train_linear_with_a_task_whose_file_is_empty(spark, tmp_path):
    """Two files for two tasks, one of them empty: that task takes part in every collective,
    and the model is one worker's on the other file's line."""
    from terascale.linear import parse_lines, train

    files = [tmp_path / "one.vw", tmp_path / "none.vw"]
    files[0].write_text("1 |a x y\n")
    files[1].write_text("")
    model = terascale.spark.train_linear([str(f) for f in files], spark=spark, cache_dir="",
                                         bits=12)
    assert np.array_equal(model.dense(), train(parse_lines(["1 |a x y"], bits=12)).dense())


def test_train_linear_on_a_tabular_dataframe(spark):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 3))
    y = (x @ np.array([1.0, -2.0, 0.5]) > 0).astype(int)
    rows = [(int(t), *map(float, r), "free text") for t, r in zip(y, x)]
    df = spark.createDataFrame(rows, ["y", "a", "b", "c", "note"]).repartition(2)
    model = terascale.spark.train_linear(df, spark=spark, format="csv", label="y",
                                         ignore=["note"], bits=12, passes=3)
    assert model.info["workers"] == 2
    assert model.info["features"] == 4  # a, b, c and the constant: "note" was dropped
    with pytest.raises(terascale.ConfigError, match="column="):
        terascale.spark.train_linear(df, spark=spark, format="vw")
