"""PyTorch's own distributed test base (``DistributedTest._DistTestBase``) on a chosen backend.

The equivalent of torch's ``test/distributed/test_distributed_spawn.py``: every test of the
base class runs in fresh ranks (file:// rendezvous), forked from this driver so that they
inherit its imports (``TS_DIST_START=spawn``: spawned, as torch's driver does), on one of
three set-ups:

* ``gloo``: torch's own backend, the reference (which tests pass on this CPU machine);
* ``terascale``: ``BACKEND=terascale``, registered in every spawned rank and added to each
  capability set gloo is in (``DistTestCases.skip_collective`` / ``backend_feature``), so the
  base class skips on terascale exactly what it skips on gloo;
* ``gloo-on-terascale``: ``BACKEND=gloo`` for the tests that check for the name "gloo"
  (timeouts, ``monitored_barrier``, the gloo ``batch_isend_irecv`` tests, sparse
  all_reduce...), with every group torch would create on gloo created on terascale instead
  (``get_backend()`` still answers "gloo", which is what those tests and torch's own
  ``monitored_barrier`` check).

Usage (the whole suite: ``make test-torch``)::

    python tests/torch/dist_suite.py --setup terascale --world-size 2 [-k send] [--json out.json]

The exit status is 0 when no test failed. ``GLOO_ONLY`` lists the tests that pass on gloo
and not on terascale under any set-up, each with torch's reason: the target is that the
list is all there is.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import unittest

# torch's own gloo-only checks: tests that pass on gloo and cannot on a plugin backend,
# whatever it implements. Keyed by test name: the reason. Empty: the two such checks found
# (monitored_barrier refusing any backend not named "gloo"; the profiler events gloo's C++
# work records as "gloo:<op>") are met by running those tests as gloo-on-terascale.
GLOO_ONLY: dict[str, str] = {}

# Tests that fail under the gloo-on-terascale set-up only because of the set-up (each
# passes under terascale's own name), with the reason.
SETUP_ONLY: dict[str, str] = {
    "test_ddp_logging_data_cpu": "DDP's logging records the group's own backend name "
    "('terascale'); the test expects get_backend()'s answer, which the set-up keeps 'gloo'",
}


def _configure() -> str:
    """Runs in the parent and in every spawned rank (they import this module by path)."""
    setup = os.environ.setdefault("TS_DIST_SETUP", "terascale")
    os.environ["BACKEND"] = "gloo" if setup.startswith("gloo") else "terascale"
    os.environ.setdefault("INIT_METHOD", "file://")
    os.environ.setdefault("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "120")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "TEMP_DIR" not in os.environ:
        os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="ts-dist-suite-")
    import torch.distributed as dist
    from torch.testing._internal import common_distributed as cd

    import terascale.torch  # noqa: F401  registers the backend in this process

    if setup != "gloo":
        for sets in (cd.DistTestCases.skip_collective, cd.DistTestCases.backend_feature):
            for names in sets.values():
                if "gloo" in names:
                    names.add("terascale")
        cd.DistTestCases.backend_feature["plugin"].add("terascale")
    if setup == "gloo-on-terascale":
        _gloo_groups_on_terascale(dist)
    return setup


def _gloo_groups_on_terascale(dist) -> None:  # type: ignore[no-untyped-def]
    """Every group torch creates on "gloo" is created on "terascale"; torch's records (what
    ``get_backend`` answers) keep the name "gloo"."""
    c10d = dist.distributed_c10d
    helper = c10d._new_process_group_helper
    if getattr(helper, "_terascale", False):
        return

    def create(group_size, group_rank, global_ranks, backend, store, *args, **kwargs):  # type: ignore[no-untyped-def]
        name = str(backend).lower()
        if name not in ("gloo", "cpu:gloo", "undefined"):
            return helper(group_size, group_rank, global_ranks, backend, store, *args,
                          **kwargs)
        pg, prefix = helper(group_size, group_rank, global_ranks, "terascale", store, *args,
                            **kwargs)
        if pg in c10d._world.pg_map:
            c10d._world.pg_map[pg] = ("gloo", c10d._world.pg_map[pg][1])
            c10d._world.pg_backend_config[pg] = "cpu:gloo"
        return pg, prefix

    create._terascale = True  # type: ignore[attr-defined]
    c10d._new_process_group_helper = create


if __name__ == "__main__":  # the spawned ranks (__mp_main__) read these from the environment
    for _i, _a in enumerate(sys.argv[:-1]):
        if _a == "--setup":
            os.environ["TS_DIST_SETUP"] = sys.argv[_i + 1]
        if _a == "--world-size":
            os.environ["WORLD_SIZE"] = sys.argv[_i + 1]
os.environ.setdefault("WORLD_SIZE", "2")
SETUP = _configure()
# "fork" (the default: the ranks inherit the imports) or "spawn" (torch's own driver's way)
START_METHOD = os.environ.get("TS_DIST_START", "fork")

import torch.multiprocessing  # noqa: E402
from torch.testing._internal.distributed import distributed_test as _dt  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

if SETUP == "gloo-on-terascale":
    # Where the suite asks the profiler for the events gloo's C++ work objects record
    # ("gloo:all_reduce", asynchronous), it does so by the backend's name; a Python process
    # group cannot record asynchronous events, and under its own name the suite does not ask
    # (terascale is not in these lists): ask it the same here.
    for _names in (_dt.PROFILING_SUPPORTED_BACKENDS, _dt.CUDA_PROFILING_SUPPORTED_BACKENDS,
                   _dt.SEND_RECV_PROFILING_SUPPORTED_BACKENDS):
        while "gloo" in _names:
            _names.remove("gloo")


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """torch's spawn driver: each test in ``WORLD_SIZE`` fresh processes."""

    def setUp(self) -> None:
        super().setUp()
        if START_METHOD == "fork":
            # The ranks inherit this process's imports (torch, its test helpers, terascale)
            # instead of each importing them again: the same tests, seconds less each. What
            # a spawned rank reads from the environment at import, a forked one inherits:
            # the world group's re-initialization file, set afresh for each test by setUp.
            _dt.INIT_METHOD = os.environ["INIT_METHOD"]
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()


class _Record(unittest.TextTestResult):
    json_path: str | None = None
    earlier: dict[str, dict[str, object]] = {"outcome": {}, "seconds": {}}

    def __init__(self, *a, **k) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*a, **k)
        self.outcome: dict[str, str] = dict(_Record.earlier["outcome"])  # type: ignore[arg-type]
        self.seconds: dict[str, float] = dict(_Record.earlier["seconds"])  # type: ignore[arg-type]
        self._t0 = 0.0

    def startTest(self, test) -> None:  # type: ignore[no-untyped-def]  # noqa: N802
        self._t0 = time.monotonic()
        super().startTest(test)

    def _put(self, test, what: str) -> None:  # type: ignore[no-untyped-def]
        name = test.id().rsplit(".", 1)[-1]
        self.outcome[name] = what
        self.seconds[name] = round(time.monotonic() - self._t0, 2)
        if _Record.json_path:  # after every test, so that a run stopped part-way keeps its results
            _write(_Record.json_path, self)

    def addSuccess(self, test) -> None:  # type: ignore[no-untyped-def]  # noqa: N802
        super().addSuccess(test)
        self._put(test, "passed")

    def addFailure(self, test, err) -> None:  # type: ignore[no-untyped-def]  # noqa: N802
        super().addFailure(test, err)
        self._put(test, "failed")

    def addError(self, test, err) -> None:  # type: ignore[no-untyped-def]  # noqa: N802
        super().addError(test, err)
        self._put(test, "failed")

    def addSkip(self, test, reason) -> None:  # type: ignore[no-untyped-def]  # noqa: N802
        super().addSkip(test, reason)
        self._put(test, "skipped")


def _write(path: str, result: _Record) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump({"setup": SETUP, "world_size": int(os.environ["WORLD_SIZE"]),
                   "outcome": result.outcome, "seconds": result.seconds}, f, indent=1)
    os.replace(path + ".tmp", path)


def report(directory: str) -> int:
    """Compare the runs in ``directory`` (``{setup}-{world size}.json``): every test that
    passed on gloo must pass on terascale, under its own name or as gloo-on-terascale,
    except :data:`GLOO_ONLY`. Prints the counts and the misses; 0 when there are none."""
    runs: dict[tuple[str, int], dict[str, str]] = {}
    seconds: dict[tuple[str, int], float] = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            with open(os.path.join(directory, name)) as f:
                d = json.load(f)
            runs[(d["setup"], d["world_size"])] = d["outcome"]
            seconds[(d["setup"], d["world_size"])] = sum(d.get("seconds", {}).values())
    missed = 0
    total = len(unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn))
    print(f"{'set-up':18}  world size  of {total}  passed  failed  skipped  minutes")
    for (setup, ws), outcome in sorted(runs.items()):
        counts = [sum(v == k for v in outcome.values()) for k in ("passed", "failed", "skipped")]
        print(f"{setup:18}  {ws:10}  {len(outcome):5}  {counts[0]:6}  {counts[1]:6}  "
              f"{counts[2]:7}  {seconds[(setup, ws)] / 60:7.0f}")
    for (setup, ws), outcome in sorted(runs.items()):
        for test, v in sorted(outcome.items()):
            if v == "failed":
                why = SETUP_ONLY.get(test, "") if setup == "gloo-on-terascale" else ""
                print(f"  {setup} world size {ws}: {test} failed" + (f" ({why})" if why else ""))
    for ws in sorted({ws for _, ws in runs}):
        gloo = runs.get(("gloo", ws), {})
        ours = {**runs.get(("gloo-on-terascale", ws), {}), }
        for k, v in runs.get(("terascale", ws), {}).items():
            if v == "passed" or k not in ours:
                ours[k] = v
        for test, v in sorted(gloo.items()):
            if v == "passed" and ours.get(test) != "passed" and test not in GLOO_ONLY:
                print(f"  world size {ws}: {test} passes on gloo, {ours.get(test, 'not run')} "
                      "on terascale")
                missed += 1
    return 1 if missed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--setup", choices=["gloo", "terascale", "gloo-on-terascale"])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("-k", action="append", default=[], help="run tests whose name contains this")
    p.add_argument("--only", help="file with one test name a line: run exactly those")
    p.add_argument("--json", help="write {test: passed|failed|skipped} here")
    p.add_argument("--resume", action="store_true",
                   help="keep the results already in --json and run only the tests it lacks")
    p.add_argument("--report", help="compare the JSON files in this folder instead of running")
    args = p.parse_args(argv)
    if args.report:
        return report(args.report)
    names = unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
    if args.only:
        with open(args.only) as f:
            wanted = {line.strip() for line in f if line.strip()}
        names = [n for n in names if n in wanted]
    if args.k:
        names = [n for n in names if any(k in n for k in args.k)]
    done: dict[str, dict[str, object]] = {"outcome": {}, "seconds": {}}
    if args.resume and args.json and os.path.exists(args.json):
        with open(args.json) as f:
            done = json.load(f)
        names = [n for n in names if n not in done["outcome"]]
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    _Record.json_path = args.json
    runner = unittest.TextTestRunner(verbosity=2, resultclass=_Record)
    _Record.earlier = done
    result = runner.run(suite)
    if args.json:
        _write(args.json, result)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
