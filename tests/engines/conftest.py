"""One SparkSession per Spark master while the engines' tests run.

Starting a Spark driver (a JVM, py4j, the Python workers) costs seconds of the 2 cores,
and the local[2] modules all want the same session. A JVM holds one SparkContext, so
asking for another master (local-cluster) stops the current session first; the modules
that share a master are named so that they run one after the other (test_spark.py and
test_spark_ml.py on local[2], then test_spark_separate_executors.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

_CONF = {  # the masters the modules ask for
    # two attempts of a barrier job: a rerun happens, and a job that fails every attempt
    # (a worker killed each time) gives up after two, not Spark's default four
    "local[2]": {"spark.sql.shuffle.partitions": "2", "spark.stage.maxConsecutiveAttempts": "2"},
    "local-cluster[2,1,1024]": {"spark.executor.memory": "512m"},
}


class _Sessions:
    def __init__(self) -> None:
        self.master: str | None = None
        self.session: Any = None

    def get(self, master: str) -> Any:
        from pyspark.sql import SparkSession

        if self.session is not None and self.master == master:
            return self.session
        self.stop()
        os.environ["PYSPARK_PYTHON"] = sys.executable
        builder = (SparkSession.builder.master(master).appName("terascale-tests")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false"))
        for k, v in _CONF[master].items():
            builder = builder.config(k, v)
        session = builder.getOrCreate()
        # getOrCreate hands back a live session of another master as is: refuse that
        assert session.sparkContext.master == master, session.sparkContext.master
        session.sparkContext.setLogLevel("FATAL")
        self.master, self.session = master, session
        return session

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
        self.master = self.session = None


_SESSIONS = _Sessions()


@pytest.fixture(scope="session")
def spark_sessions() -> Iterator[_Sessions]:
    yield _SESSIONS
    _SESSIONS.stop()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the session after the engines' last test: a process that later tests fork
    inherits py4j's socket, and a child's garbage collection would write to it."""
    here = os.path.dirname(__file__)
    if nextitem is None or os.path.dirname(str(nextitem.path)) != here:
        _SESSIONS.stop()
