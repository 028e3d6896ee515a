"""A fast subset of PyTorch's own distributed test base on the "terascale" backend (the whole
suite, at world sizes 2 and 3 against gloo: ``make test-torch``, see ``dist_suite.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch's test helpers need it (the test extra has it)
pytestmark = pytest.mark.torch

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(("setup", "tests"), [
    # under the backend's own name: point-to-point from any source and with tags,
    # all_gather_coalesced, DDP's static graph
    ("terascale", ["test_send_recv_any_source", "test_send_recv_with_tag",
                   "test_all_gather_coalesced_with_empty", "test_static_graph_api_cpu"]),
    # torch's gloo-named tests, with gloo's groups created on terascale: batch_isend_irecv,
    # sparse all_reduce, all_reduce_coalesced, monitored_barrier, a timeout's wording
    ("gloo-on-terascale", ["test_batch_isend_irecv_gloo_tags", "test_sparse_all_reduce_sum",
                           "test_all_reduce_coalesced_sum", "test_monitored_barrier_gloo_subgroup",
                           "test_barrier_timeout_full_group"]),
])
def test_torch_distributed_suite_subset(setup: str, tests: list[str], tmp_path: Path) -> None:
    only = tmp_path / "only.txt"
    only.write_text("\n".join(tests))
    out = tmp_path / "out.json"
    env = dict(os.environ, TEMP_DIR=str(tmp_path), PYTHONPATH=str(HERE.parents[1] / "src"))
    env.pop("TS_DIST_SETUP", None)
    run = subprocess.run([sys.executable, str(HERE / "dist_suite.py"), "--setup", setup,
                          "--world-size", "2", "--only", str(only), "--json", str(out)],
                         capture_output=True, text=True, timeout=240, env=env)
    assert out.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    outcome = json.loads(out.read_text())["outcome"]
    assert outcome == dict.fromkeys(tests, "passed"), run.stderr[-4000:]
