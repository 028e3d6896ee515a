"""terascale._files: large files are handed to the kernel in pieces, with nothing changed."""

from __future__ import annotations

import io

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
