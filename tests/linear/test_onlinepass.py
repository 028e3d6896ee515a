"""The online pass's loop (``_online/_onlinepass.py``): what it leaves resident."""

import numpy as np

from terascale import _pages
from terascale.linear import synthetic, train
from terascale.linear._online import _onlinepass


def test_a_pass_over_a_cache_drops_llvm_once_its_kernel_is_loaded(tmp_path, monkeypatch):
    # a pass over fixed columns (a cache of narrow data) loads its kernel with a call over
    # no example, then hands LLVM's code pages back before it learns, once a process; the
    # first pass over the text (growing columns) leaves that to its dense move
    path = synthetic.write_click(str(tmp_path / "n.vw"), 500, seed=1)
    dropped: list[str] = []
    real = _pages.give_back_library
    monkeypatch.setattr(_pages, "give_back_library",
                        lambda name: dropped.append(name) or real(name))
    monkeypatch.setattr(_onlinepass, "_DROPPED", [])
    text = train(path, bits=18, cache_dir=str(tmp_path / "c"), passes=1)
    assert dropped == []
    cached = train(path, bits=18, cache_dir=str(tmp_path / "c"), passes=1)
    assert "first_pass_s" not in cached.info  # (the pass read the cache)
    assert dropped == ["libllvmlite"]
    assert np.array_equal(text.indices, cached.indices)
    assert text.weights.tobytes() == cached.weights.tobytes()
    train(path, bits=18, cache_dir=str(tmp_path / "c"), passes=3)
    assert dropped == ["libllvmlite"]  # (once a process)
