"""``terascale bench linear``'s pieces at tiny scale: the click-style generator, --sizes."""

from __future__ import annotations

import os

import numpy as np
import pytest

import terascale.linear as tl
from terascale import ConfigError
from terascale.bench._linear_children import cut_shards
from terascale.bench._linear_large import parse_count
from terascale.linear.synthetic import CLICK_FEATURES, click_chunks, write_click


def test_click_data_is_seeded_vw_text_with_a_learnable_model(tmp_path):
    a, b = str(tmp_path / "a.vw"), str(tmp_path / "b.vw")
    write_click(a, 3000, seed=4)
    write_click(b, 3000, seed=4)
    assert open(a, "rb").read() == open(b, "rb").read()  # seeded
    assert b"".join(click_chunks(3000, seed=5)) != open(a, "rb").read()
    ds = tl.read_file(a, tl.ParseOptions(bits=20))
    assert len(ds) == 3000
    assert np.all(np.diff(ds.indptr) <= CLICK_FEATURES + 1)  # zero values are dropped
    assert set(np.unique(ds.labels)) == {-1.0, 1.0}
    test = str(tmp_path / "t.vw")
    write_click(test, 3000, seed=6)
    train = str(tmp_path / "tr.vw")
    write_click(train, 30000, seed=7)
    m = tl.train(train, bits=20, cache_dir=str(tmp_path / "c"))
    assert m.evaluate(test)["auc"] > 0.7  # the planted model is there to be found


def test_vw_cluster_shards_are_the_workers_byte_ranges(tmp_path):
    path = str(tmp_path / "d.vw")
    write_click(path, 2000, seed=1)
    opts = tl.ParseOptions(bits=18)
    for n in (2, 3):
        outs = [str(tmp_path / f"s{n}-{k}.vw") for k in range(n)]
        cut_shards(path, n, outs)
        for k in range(n):
            mine = tl.TextBlocks(path, opts, shard=(k, n)).dataset()
            np.testing.assert_array_equal(tl.read_file(outs[k], opts).indices, mine.indices)


@pytest.mark.parametrize("text, n", [("20k", 20_000), ("1M", 1_000_000), ("1.5M", 1_500_000),
                                     ("2G", 2_000_000_000), ("300", 300)])
def test_sizes_are_counts(text, n):
    assert parse_count(text) == n


def test_bad_size_names_the_flag():
    with pytest.raises(ConfigError, match="--sizes"):
        parse_count("lots")


def test_large_recipes_are_chosen_by_short_name_and_a_bad_one_names_the_flag():
    from terascale.bench._linear_large import LARGE, parse_recipes
    assert parse_recipes(None) == list(LARGE)
    assert parse_recipes("text,lbfgs") == ["one pass from text", "L-BFGS recipe"]
    with pytest.raises(ConfigError, match="--recipes.*'pass'"):
        parse_recipes("pass")


def test_wide_takes_bits_and_interactions_from_the_command_line():
    import argparse

    from terascale.bench.linear import add_bench_parser

    p = argparse.ArgumentParser()
    add_bench_parser(p.add_subparsers())
    args = p.parse_args(["linear", "--wide", "--bits", "28", "--quadratic", "ab,ac",
                         "--recipes", "text,cache"])
    assert (args.wide, args.bits, args.quadratic) == (True, 28, "ab,ac")
    assert p.parse_args(["linear", "--wide", "-b", "20"]).bits == 20
    assert p.parse_args(["linear", "--wide"]).bits == 24


@pytest.mark.parametrize("cli", [True, False])
def test_vw_cache_recipe_reads_its_own_cache_once_and_equals_the_text_pass(tmp_path, cli):
    """VW with ``-c`` reads every cache it finds, ``<data>.cache`` beside the data included:
    one left there by an earlier run must not make the cache recipe learn the data twice."""
    import subprocess
    import sys

    from terascale.bench._linear_vw import run_vw

    train, test = str(tmp_path / "tr.vw"), str(tmp_path / "te.vw")
    write_click(train, 2000, seed=1)
    write_click(test, 500, seed=2)
    subprocess.run([sys.executable, "-m", "vowpalwabbit", "--quiet", "-d", train, "-c",
                    "-b", "18"], check=True, timeout=120)  # the leftover tr.vw.cache
    runs = {}
    for name, flags in (("text", ""), ("cache", "-c")):
        d = tmp_path / name
        d.mkdir()
        runs[name] = run_vw({"train": train, "test": test, "bits": 18, "cache": str(d),
                             "stage1": flags, "stage2": None, "cli": cli})
    text, cache = runs["text"]["vw"][0], runs["cache"]["vw"][0]
    assert (text["examples"], text["read"], text["wrote"]) == (2000, [], [])
    assert cache["examples"] == 2000 and cache["sources"] == 1
    assert cache["read"] == [str(tmp_path / "cache" / "vw.cache")] and cache["wrote"] == []
    assert runs["cache"]["logloss"] == runs["text"]["logloss"]  # the same pass, bitwise
    assert runs["cache"]["cache_bytes"] > 0


def test_wide_data_is_generated_once_and_seeded(tmp_path):
    from terascale.bench._linear_large import _data

    a, b = _data(str(tmp_path), 2000, wide=True)
    assert os.path.basename(a) == "wide-2k-train.vw" and os.path.basename(b) == "wide-2k-test.vw"
    first = open(a, "rb").read()
    os.unlink(a)
    assert _data(str(tmp_path), 2000, wide=True)[0] == a and open(a, "rb").read() == first
