"""Workers with little or no data of their own (an empty shard, one line, only bad lines,
a shard read from its cache beside one read as text) take part in every collective the
others call: each run ends with exit 0 (or the one clear error) and the same model on
every rank and run. The quick cases run in CI; ``TERASCALE_LITTLE_DATA_FULL=1`` (``make
test-little-data``) runs every flag combination."""

from __future__ import annotations

import os
import shutil

import pytest

from terascale.cli import main

FULL = os.environ.get("TERASCALE_LITTLE_DATA_FULL") == "1"

LINES = ["1 |a x y", "-1 |a z w", "1 |a x", "-1 |b q", "1 |a y z"]


def _linear(capfd, *args: str) -> tuple[int, str]:
    """``terascale linear ARGS`` in this process (``-n`` still starts real workers)."""
    capfd.readouterr()
    code = main(["linear", *args])
    out, err = capfd.readouterr()
    return code, out + err


@pytest.mark.parametrize("every", [None, "1"])
def test_a_shard_read_from_its_cache_beside_one_read_as_text(tmp_path, capfd, every):
    # a run whose cache of one shard is gone (an interrupted run, an evicted entry): that
    # worker parses its text while the others read their caches, and every collective
    # still meets; the model is the one every cache gives
    data = tmp_path / "five.vw"
    data.write_text("\n".join(LINES) + "\n")
    cache = tmp_path / "cache"
    flags = ["-n", "3", "--passes", "3", "-c", "--cache-dir", str(cache), "-b", "12"]
    if every:
        flags += ["--average-every", every]
    models = []
    for k in range(3):
        if k == 2:  # one shard's entry removed before the third run
            shutil.rmtree(sorted(cache.iterdir())[0])
        model = tmp_path / f"m{k}"
        code, out = _linear(capfd, "train", str(data), *flags, "-f", str(model))
        assert code == 0, out
        models.append(model.read_bytes())
    assert models[1] == models[0]  # every shard from its cache
    assert models[2] == models[0]  # one from its text

