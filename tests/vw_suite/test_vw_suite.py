"""VW's own conformance tests (the linear-learner part), live against pip vowpalwabbit.

CI runs a fast subset that covers each kind of test the drop-in reproduces (one pass,
``-t -i``, passes with and without holdout, ``-q``/``--interactions``/``--ignore_linear``,
``--keep``, L1/L2, ``--oaa``, quantile, classic and poisson losses,
``--leave_duplicate_interactions``, ``--min_prediction``/``--max_prediction``,
``--holdout_after``, VW's ``--bfgs`` and ``--conjugate_gradient`` with and without holdout
and with an input regularizer, ``--redefine``, ``--feature_limit``, ``--feature_mask``, a run
without data that sets ``--l1_state``/``--l2_state``); every one of them must reproduce VW. It
runs all VW's commands in one interpreter and all terascale's in another (no start-up per
command). The whole suite, each command in an interpreter of its own, runs with ``make
test-vw`` (a table, about 5 minutes); its number of reproducing tests must not fall below
``FLOOR``, checked here when ``TERASCALE_VW_SUITE=all``.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("vowpalwabbit")

from _vwsuite import load_tests, run_suite, summary  # noqa: E402

FAST = [8, 31, 81, 107, 152, 184, 388, 470, 509, 535, 537, 549, 579, 580, 594, 647, 713,
        719, 724]
FLOOR = 119  # of the 119 tests VW itself passes (make test-vw)


def test_fast_subset_reproduces_vw() -> None:
    outcomes = run_suite(set(FAST), one_process=True)
    bad = [f"{o.id} {o.status}: {o.detail}" for o in outcomes if o.status != "pass"]
    assert len(outcomes) == len(FAST)
    assert not bad, "\n".join(bad)


def test_commands_run_in_one_interpreter_keep_their_own_outcomes(tmp_path) -> None:
    """``run_many`` gives each command line its own exit status, output and prediction
    files, as a fresh interpreter per command would."""
    from _vwsuite import DATA, run_many

    (tmp_path / "d.vw").write_bytes((DATA / "train-sets" / "0002_25.dat").read_bytes())
    runs = [["vw", "-d", "d.vw", "-p", "a.p"], ["vw", "--no_such_flag", "-p", "a.p"],
            ["vw", "-d", "d.vw", "--passes", "2", "-c", "-k", "-p", "b.p"]]
    one, bad, two = run_many("terascale", runs, tmp_path)
    assert (one.rc, bad.rc, two.rc) == (0, 2, 0)
    assert "average loss" in one.stderr and "--no_such_flag" not in one.stderr
    assert "--no_such_flag" in bad.stderr and "average loss" not in bad.stderr
    assert bad.files == {"a.p": None}  # the first run's file was removed, not passed on
    assert len(one.files["a.p"].splitlines()) == 25 and one.files["a.p"] != two.files["b.p"]


def test_suite_selection() -> None:
    """The kept tests run VW's plain linear learner: no reduction but --oaa, also in the
    options stored in a VW model that a test reads with -i."""
    from _vwsuite import DATA

    tests = load_tests()
    assert len(tests) == 121
    ids = {t["id"] for t in tests}
    for t in tests:  # every dependency is kept with the test that needs it
        assert set(t.get("depends_on", [])) <= ids
        for bad in ("--cb", "--search", "--lda", "--ksvm", "--nn ", "--csoaa", "--dsjson"):
            assert bad not in t["vw_command"] + " "
    reductions = (b"--cb", b"--csoaa", b"--search", b"--lda", b"--ksvm", b"--nn ")
    for model in (DATA / "model-sets").iterdir():  # its header's options: VW applies them
        assert not any(r in model.read_bytes()[:4096] for r in reductions), model


@pytest.mark.skipif(os.environ.get("TERASCALE_VW_SUITE") != "all",
                    reason="the whole suite takes minutes: TERASCALE_VW_SUITE=all or make test-vw")
def test_whole_suite_does_not_regress() -> None:
    counts = summary(run_suite())
    assert counts.get("pass", 0) >= FLOOR, counts
