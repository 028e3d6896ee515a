"""`-f` in VW's format at the end of a first pass in dense rows: the bytes are those the
earlier writer (the whole model formatted at once, 1M features a write) gave, pinned by
their digests, whatever the pieces, and VW's own after the version string; the real
``vw -i`` predicts with them as with VW's own
model; and the kernel is never handed more than ``_WRITE`` bytes at once."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from _vw_runs import hex_id_lines, run_ts, run_vw

pytest.importorskip("vowpalwabbit")

# sha256 of the two models below as terascale wrote them before the writer formatted them
# a piece at a time into one buffer (commit 79c23d0: the whole model in one piece here);
# the save_resume one with VW's performance counters (the loss since the last progress
# line, its dump_interval, the weighted labels, the features), as VW's own
PINNED = {
    "resume": "d9dcd5b462ba0addae52f2736798ddda24c8403c86375bdd5688e2b7b0e247e5",
    "predict_only": "1689d9c97167ce402840751bb0dc6185a4e0b232a151a06833e51e59a5d68f57",
}


def distinct_lines(n: int = 600, seed: int = 11) -> list[str]:
    """Rows of 30 hexadecimal ids of 2**40 (nearly every feature new) and 3 of 40 common
    ones, the label from the common ones: the first pass moves to dense rows early."""
    return hex_id_lines(n, seed, ids=33, common=3, of=40, above=2)


FLAGS = {"resume": ["-b", "16", "--loss_function", "logistic"],
         "predict_only": ["-b", "16", "--loss_function", "logistic", "--predict_only_model"]}


@pytest.mark.parametrize("learner", ["numba", "compiled"])
def test_the_model_is_the_earlier_writers_bytes_and_vw_predicts_with_it(
        tmp_path, capfd, monkeypatch, learner):
    from terascale.linear._io import _stream
    from terascale.linear._online import _firstpass
    from terascale.linear._vw import _vwmodel, _vwonline

    if learner == "numba":  # (the numba pass's dense rows; else the compiled learner's)
        monkeypatch.setattr(_vwonline, "c_path", lambda args: "the numba pass")
    elif _vwonline._fast() is None:
        pytest.skip("the compiled core was not built")

    (tmp_path / "d.vw").write_text("\n".join(distinct_lines()) + "\n")
    monkeypatch.setattr(_stream, "CHUNK_BYTES", 8 << 10)  # blocks of ~25 examples
    monkeypatch.setattr(_vwmodel, "_CHUNK", 333)  # many pieces, cut inside records
    monkeypatch.setattr(_vwmodel, "_WRITE", 1000)
    gathered = []
    real = _firstpass._DenseRows.shrink
    monkeypatch.setattr(_firstpass._DenseRows, "shrink",
                        lambda self, seen: gathered.append(real(self, seen)) or gathered[-1])
    for form, flags in FLAGS.items():
        code, err = run_ts(capfd, ["-d", "d.vw", *flags, "-f", f"ts-{form}.model"], tmp_path,
                           monkeypatch)
        assert code == 0, err
        data = (tmp_path / f"ts-{form}.model").read_bytes()
        assert len(data) > 20 * 1000
        assert hashlib.sha256(data).hexdigest() == PINNED[form], form
        run_vw(["-d", "d.vw", *flags, "-f", f"vw-{form}.model"], tmp_path)
        vw = (tmp_path / f"vw-{form}.model").read_bytes()  # (after the version strings)
        assert data[4 + data[0]:] == vw[4 + vw[0]:], form
        for who in ("ts", "vw"):
            run_vw(["-i", f"{who}-{form}.model", "-t", "-d", "d.vw", "-p", f"{who}.p",
                    "--quiet"], tmp_path)
        p = (tmp_path / "ts.p").read_text()
        assert p == (tmp_path / "vw.p").read_text() and len(set(p.split())) > 100
    # both runs of the numba pass ended in dense rows, their features listed by the gather
    if learner == "numba":
        assert len(gathered) == 2 and all(n > 10_000 and len(f) == n for n, f in gathered)
    else:
        assert not gathered


def test_no_write_hands_the_kernel_more_than_the_limit(monkeypatch):
    from terascale.linear._vw import _vwmodel

    class Recorder:
        def __init__(self) -> None:
            self.sizes: list[int] = []
            self.data = bytearray()

        def write(self, b) -> None:
            self.sizes.append(len(b))
            self.data += b

    monkeypatch.setattr(_vwmodel, "_WRITE", 4096)
    big = np.arange(10_000, dtype=np.uint32)
    pieces = [b"head", big.view(np.uint8), memoryview(b"x" * 9000), b""]
    f = Recorder()
    _vwmodel._write_pieces(f, pieces)
    assert bytes(f.data) == b"head" + big.tobytes() + b"x" * 9000
    assert max(f.sizes) == 4096 and len(f.sizes) == 1 + 10 + 3
    f = Recorder()
    _vwmodel._write_pieces(f, b"y" * 10_000)  # (one bytes object: sliced alike)
    assert f.sizes == [4096, 4096, 1808] and bytes(f.data) == b"y" * 10_000


def test_the_model_is_flushed_to_disk_and_gets_the_usual_mode(tmp_path, monkeypatch):
    # the file's data reaches the disk before the rename, the rename after it (as a
    # terascale model's), and the file has open()'s mode under the umask, not mkstemp's 0600
    import os

    from terascale.linear._vw import _vwmodel

    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.fstat(fd)) or real(fd))
    old = os.umask(0o027)
    try:
        _vwmodel._write_atomic(str(tmp_path / "m.model"), [b"abc", b"def"])
    finally:
        os.umask(old)
    st = os.stat(tmp_path / "m.model")
    assert (tmp_path / "m.model").read_bytes() == b"abcdef"
    assert st.st_mode & 0o777 == 0o640
    # the file (its inode: the one renamed into place), then the directory
    assert [s.st_ino for s in synced] == [st.st_ino, os.stat(tmp_path).st_ino]
    assert os.listdir(tmp_path) == ["m.model"]
