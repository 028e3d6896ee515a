"""The Python surface of terascale.linear inside a job: a communicator the user opened is
reused and left open, errors name Python parameters, the public shard loader, warm starts
and progressive predictions."""

from __future__ import annotations

import numpy as np
import pytest
from _linear_data import vw_lines

import terascale
import terascale.linear as tl
from terascale import ConfigError
from terascale.testing import run_workers

LINES = vw_lines(600, seed=3)


def _train_inside_open_job(comm):
    own = terascale.init()  # the user's communicator: init() twice is the same one
    assert own is comm
    half = LINES[comm.rank::comm.size]
    model = tl.train(tl.parse_lines(half, bits=12), holdout=0)  # comm=None: reuse it
    # still open: the user's next collective works, and every rank has the same model
    total = comm.allreduce(np.array([1.0]))
    return float(total[0]), model.dense().tobytes()


def test_train_reuses_the_open_communicator_and_leaves_it_open():
    out = run_workers(_train_inside_open_job, 2, timeout=120)
    assert [o[0] for o in out] == [2.0, 2.0]
    assert out[0][1] == out[1][1]


def test_option_errors_name_the_python_parameter_and_the_cli_the_flag(tmp_path, capfd):
    ds = tl.parse_lines(LINES[:20], bits=12)
    with pytest.raises(ConfigError, match=r"^learning_rate= must be > 0"):
        tl.train(ds, learning_rate=0)
    with pytest.raises(ConfigError, match=r"^loss= must be one of"):
        tl.train(ds, loss="pinball")
    with pytest.raises(ConfigError, match=r"^loss='expectile' needs expectile_q= in"):
        tl.train(ds, loss="expectile")
    with pytest.raises(ConfigError, match=r"bits=16: the data was parsed with bits=12"):
        tl.train(ds, bits=16)
    with pytest.raises(ConfigError, match=r"^bits= must be in 1\.\.30"):
        tl.parse_lines(LINES[:2], bits=40)
    from terascale.cli import main

    path = tmp_path / "d.vw"
    path.write_text("\n".join(LINES[:20]) + "\n")
    capfd.readouterr()
    assert main(["linear", "train", str(path), "-l", "0", "-f", str(tmp_path / "m")]) == 2
    assert "-l/--learning-rate must be > 0" in capfd.readouterr().err
    assert main(["linear", "train", str(path), "-b", "40", "-f", str(tmp_path / "m")]) == 2
    assert "-b/--bits must be in 1..30" in capfd.readouterr().err


def test_load_shard_splits_files_over_ranks_and_caches(tmp_path):
    path = tmp_path / "d.vw"
    path.write_text("\n".join(LINES) + "\n")
    whole = tl.load_shard(str(path), bits=12, cache_dir=str(tmp_path / "c"))
    parts = [tl.load_shard([str(path)], rank=r, size=3, bits=12, cache_dir=str(tmp_path / "c"))
             for r in range(3)]
    assert sum(len(p) for p in parts) == len(whole) == len(LINES)
    joined = tl.Dataset.concat([p.dataset() for p in parts])
    np.testing.assert_array_equal(np.asarray(joined.indices), np.asarray(whole.dataset().indices))
    assert any((tmp_path / "c").iterdir())  # the cache was written
    with pytest.raises(ConfigError, match="unknown parse option.*passes"):
        tl.load_shard(str(path), passes=2)
    with pytest.raises(ConfigError, match="rank= and size="):
        tl.load_shard(str(path), rank=1)


def test_warm_start_continues_the_online_learner_as_one_run(tmp_path):
    a, b = LINES[:300], LINES[300:]
    one = tl.train(tl.parse_lines(a + b, bits=12), holdout=0)
    first = tl.train(tl.parse_lines(a, bits=12), holdout=0)
    assert first.adaptive is not None  # online only: the learner's state is kept
    first.save(str(tmp_path / "a.model"))
    loaded = tl.LinearModel.load(str(tmp_path / "a.model"))
    second = tl.train(tl.parse_lines(b, bits=12), initial=loaded, holdout=0)
    # float32 weights and sums in the file: the same model up to float32 rounding
    np.testing.assert_allclose(second.dense(), one.dense(), rtol=1e-4, atol=1e-5)
    # without the adaptive state the second run would restart its learning rates
    cold = tl.LinearModel(indices=loaded.indices, weights=loaded.weights, parse=loaded.parse,
                          loss=loaded.loss)
    restarted = tl.train(tl.parse_lines(b, bits=12), initial=cold, holdout=0)
    assert np.max(np.abs(restarted.dense() - one.dense())) > 1e-3
    # features only the first part had keep their weights
    only_a = tl.train(tl.parse_lines(["1 |z only_here"], bits=12), holdout=0)
    merged = tl.train(tl.parse_lines(b, bits=12), initial=only_a, holdout=0)
    assert set(only_a.indices.tolist()) <= set(merged.indices.tolist())
    with pytest.raises(ConfigError, match="bits=14: the initial model was trained with bits=12"):
        tl.train(tl.parse_lines(b, bits=14), initial=loaded)
    with pytest.raises(ConfigError, match="initial= must be a LinearModel"):
        tl.train(tl.parse_lines(b, bits=12), initial=str(tmp_path / "a.model"))


def test_progressive_predictions_come_in_order_before_learning():
    lines = LINES[:50] + ["|a c1 c2"] + LINES[50:80]  # an unlabelled example is predicted too
    got: list[np.ndarray] = []
    tags: list[str] = []

    def keep(p, t):
        got.append(p.copy())
        tags.extend(t)

    ds = tl.parse_lines(lines, bits=12)
    tl.train(ds, holdout=0, passes=2, predictions=keep)
    p = np.concatenate(got)
    assert len(p) == 2 * len(lines) and len(tags) == 2 * len(lines)
    assert p[0] == 0.0 and tags[0] == "ex0" and tags[50] == ""
    # the first example's prediction after learning it differs: they come before learning
    after_one = tl.train(tl.parse_lines(lines[:1], bits=12), holdout=0)
    assert after_one.decision_function(tl.parse_lines(lines[1:2], bits=12))[0] == \
        pytest.approx(p[1], rel=1e-5)


def test_pickles_that_name_the_modules_before_linear_had_folders_still_load():
    import pickle

    parse = tl.ParseOptions(bits=12, quadratic=("ab",))
    clf = tl.LinearClassifier(bits=12, passes=2)
    for obj, old, new in ((parse, "terascale.linear._dataset", "terascale.linear._io._dataset"),
                          (clf, "terascale.linear._sklearn",
                           "terascale.linear._front._sklearn")):
        now = pickle.dumps(obj, protocol=0)  # text protocol: the module path is plain text
        assert new.encode() in now
        back = pickle.loads(now.replace(new.encode(), old.encode()))
        assert type(back) is type(obj) and back.__dict__ == obj.__dict__


def test_a_model_drops_features_with_neither_weight_nor_state_and_copies_nothing_else():
    parse = tl.parse_lines(["1 |a x"], bits=12).parse
    idx = np.array([3, 5, 7, 9], np.uint32)
    w = np.array([0.5, 0.0, 0.0, -1.0], np.float32)
    g2 = np.array([1.0, 2.0, 0.0, 1.0], np.float32)
    state = np.zeros(3)
    m = tl.LinearModel(indices=idx, weights=w, parse=parse, loss="logistic",
                       adaptive=(g2, g2.copy(), state))
    # a zero weight with an adaptive sum resumes (kept), one with neither is dropped
    assert m.indices.tolist() == [3, 5, 9] and m.weights.tolist() == [0.5, 0.0, -1.0]
    assert m.adaptive is not None and m.adaptive[0].tolist() == [1.0, 2.0, 1.0]
    plain = tl.LinearModel(indices=idx, weights=w, parse=parse, loss="logistic")
    assert plain.indices.tolist() == [3, 9]
    # every feature kept: the float32 arrays are the model's own, not copies
    w = np.array([0.5, 0.25, -2.0, -1.0], np.float32)
    full = tl.LinearModel(indices=idx, weights=w, parse=parse, loss="logistic",
                          adaptive=(g2, g2, state))
    assert full.weights is w and full.indices is idx and full.adaptive[0] is g2


@pytest.mark.parametrize("adaptive", [True, False])
def test_keep_learned_moves_in_place_what_the_model_would_copy_out(adaptive):
    from terascale.linear._modelnb import keep_learned

    rng = np.random.default_rng(7)
    n = 5000
    idx = np.sort(rng.choice(1 << 24, n, replace=False)).astype(np.uint32)
    w = rng.standard_normal(n).astype(np.float32)
    w[rng.random(n) < 0.4] = 0.0
    w[3] = np.nan  # (kept: not equal to 0)
    g2 = np.abs(rng.standard_normal(n)).astype(np.float32)
    g2[rng.random(n) < 0.5] = 0.0
    nrm = rng.random(n).astype(np.float32)
    parse = tl.parse_lines(["1 |a x"], bits=24).parse
    ref = tl.LinearModel(indices=idx, weights=w, parse=parse, loss="squared",
                         adaptive=(g2, nrm, np.zeros(3)) if adaptive else None)
    bufs = [a.copy() for a in (idx, w, g2, nrm)]
    e = np.zeros(0, np.float32)
    k = keep_learned(bufs[0], bufs[1], *(bufs[2:] if adaptive else (e, e)))
    assert 0 < k < n and k == len(ref.indices)
    model = tl.LinearModel(indices=bufs[0][:k], weights=bufs[1][:k], parse=parse,
                           loss="squared",
                           adaptive=(bufs[2][:k], bufs[3][:k], np.zeros(3)) if adaptive
                           else None)
    # bit for bit the mask's result, and the model holds the moved arrays themselves
    assert model.indices.tobytes() == ref.indices.tobytes()
    assert model.weights.tobytes() == ref.weights.tobytes()
    assert np.shares_memory(model.weights, bufs[1])
    if adaptive:
        assert model.adaptive[0].tobytes() == ref.adaptive[0].tobytes()
        assert model.adaptive[1].tobytes() == ref.adaptive[1].tobytes()
