"""terascale.spark on local-cluster[2,1,1024]: separate executor JVMs, one of them killed."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.spark

pyspark = pytest.importorskip("pyspark")

import terascale.spark  # noqa: E402
from terascale.engines.jobs import (  # noqa: E402
    Fault,
    allreduce_job,
    checkpointed_job,
    listening_job,
)


@pytest.fixture
def spark(spark_sessions):  # one session per master: see conftest.py
    return spark_sessions.get("local-cluster[2,1,1024]")


def test_allreduce_across_two_executors(spark):
    out = terascale.spark.run(allreduce_job, num_workers=2, spark=spark)
    assert [o["rank"] for o in out] == [0, 1]
    assert all(o["sum"] == 3.0 and o["same"] for o in out)


def test_rendezvous_listens_on_loopback_under_a_local_master(spark):
    # Task 0's server, seen from both executors: loopback only, not every interface.
    out = terascale.spark.run(listening_job, num_workers=2, spark=spark)
    for o in out:
        assert o["rendezvous"].startswith("127.0.0.1:"), o
        assert o["listening"] == ["127.0.0.1"], o


def test_killed_executor_jvm_reruns_stage_and_resumes_bitwise(spark, tmp_path):
    clean = terascale.spark.run(checkpointed_job, num_workers=2,
                                args=(str(tmp_path / "clean"), 5), spark=spark)
    fault = Fault(rank=1, step=2, marker=str(tmp_path / "fired"), kind="executor")
    resumed = terascale.spark.run(checkpointed_job, num_workers=2,
                                  args=(str(tmp_path / "faulty"), 5),
                                  kwargs={"fault": fault}, spark=spark, timeout=30.0)
    assert os.path.exists(fault.marker)  # rank 1's executor JVM was SIGKILLed
    assert [start for start, _ in resumed] == [2, 2]
    assert [w for _, w in resumed] == [w for _, w in clean]
