"""``train(..., callback=)``: the job's metrics after every online pass and every
L-BFGS iteration, numbered in order, the same numbers the model's summary keeps."""

from __future__ import annotations

import math

from terascale.linear import train
from terascale.linear.synthetic import logistic_lines


def test_callback_sees_each_pass_and_iteration_in_order(tmp_path):
    path = tmp_path / "train.vw"
    path.write_text("\n".join(logistic_lines(2000, seed=3)) + "\n")
    seen: list[dict] = []
    model = train([str(path)], comm=None, bits=14, passes=2, bfgs=6, holdout=0,
                  callback=seen.append)
    online = [m for m in seen if m["phase"] == "online"]
    batch = [m for m in seen if m["phase"] == "bfgs"]
    assert [m["pass"] for m in online] == [1, 2]
    assert [m["loss"] for m in online] == model.info["online_loss"]
    assert all(m["examples"] == 2000 for m in online)
    # iteration 0 is the starting point (the online model); data passes go on from 2
    assert [m["iteration"] for m in batch] == list(range(len(batch)))
    assert len(batch) == model.info["batch_iterations"] + 1
    assert batch[0]["pass"] == 3 and all(a["pass"] < b["pass"] for a, b in zip(batch, batch[1:]))
    assert all(math.isfinite(m["objective"]) and m["gradient_norm"] >= 0 for m in batch)
    assert batch[-1]["objective"] <= batch[0]["objective"]
    assert seen.index(online[-1]) < seen.index(batch[0])  # reported as training goes
