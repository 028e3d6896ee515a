"""terascale._files: large files are handed to the kernel in pieces, with nothing changed;
a run's scratch files go with it."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys

import numpy as np

from terascale._files import WRITE_PIECE, PieceWriter


class _Recording(io.BytesIO):
    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def write(self, data) -> int:  # type: ignore[override]
        self.sizes.append(memoryview(data).nbytes)
        return super().write(data)


def test_a_large_write_reaches_the_file_in_pieces_of_at_most_the_limit():
    data = bytes(range(256)) * (3 * WRITE_PIECE // 256 + 7)
    f = _Recording()
    assert PieceWriter(f).write(data) == len(data)
    assert max(f.sizes) == WRITE_PIECE and sum(f.sizes) == len(data)
    assert f.getvalue() == data


def test_numpy_archives_written_through_it_are_byte_identical():
    a = np.arange(WRITE_PIECE, dtype=np.float64)  # 2 MiB: numpy hands it over in one write
    plain, pieces = io.BytesIO(), _Recording()
    np.savez(plain, a=a, b=a[::-1])
    np.savez(PieceWriter(pieces, piece=4096), a=a, b=a[::-1])
    assert pieces.getvalue() == plain.getvalue() and max(pieces.sizes) <= 4096
    pieces.seek(0)
    assert np.array_equal(np.load(pieces)["b"], a[::-1])


_OWNER = ("import sys, time; from terascale._files import scratch_file; "
          "print(scratch_file('x-', '.tmp')[1], flush=True); time.sleep(120)")


def _owner(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    p = subprocess.Popen([sys.executable, "-c", _OWNER], env=env, stdout=subprocess.PIPE,
                         text=True)
    return p, os.path.dirname(p.stdout.readline().strip())


def test_scratch_goes_on_sigterm_and_a_killed_owners_at_the_next_sweep(tmp_path,
                                                                        monkeypatch):
    """SIGTERM ends the owner through its exit handlers (status 143), which remove its
    scratch directory; a SIGKILLed owner's is removed by the next sweep, a live one's kept."""
    import tempfile

    from terascale import _files

    (killed, killed_dir), (live, live_dir) = _owner(tmp_path), _owner(tmp_path)
    assert killed_dir != live_dir and os.listdir(killed_dir)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(30) == -signal.SIGKILL and os.path.isdir(killed_dir)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(_files, "SCRATCH_GRACE_S", 0.0)
    _files.sweep_scratch()
    assert not os.path.exists(killed_dir) and os.listdir(live_dir)
    live.send_signal(signal.SIGTERM)
    assert live.wait(30) == 143 and os.listdir(tmp_path) == []
