"""CPU time of the VW text parser alone, per feature and per byte, on one thread, and of
VW's ``-p`` lines per example.

    python benchmarks/vw_parse_speed.py FILE [BITS] [REPEATS]

Reads up to the first 100 MiB of ``FILE`` into memory, cuts it into 1 MiB chunks at line
ends (as a text pass reads it, ``_stream.CHUNK_BYTES``) and parses every chunk with
``terascale.linear._vw._vwtext_fast.parse_vw`` (the compiled parser, the numba parser
where it hands a chunk back), ``REPEATS`` times (default 3); prints the best run's CPU
seconds, nanoseconds per feature and per byte. The allocator is set as ``terascale vw``
sets it (``_malloc.keep_freed_memory``). Then the ``-p`` text of 65536 predictions with
a tag each (``_progressive.block_tags`` and ``_vwout.prediction_lines``, as the online pass
writes them), best of ``REPEATS``, per example.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from terascale._malloc import keep_freed_memory
from terascale.linear._io._blocks import Block
from terascale.linear._io._dataset import ParseOptions
from terascale.linear._online._progressive import block_tags
from terascale.linear._vw._vwout import prediction_lines
from terascale.linear._vw._vwtext_fast import parse_vw

CHUNK = 1 << 20


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return
    path = argv[0]
    bits = int(argv[1]) if len(argv) > 1 else 18
    repeats = int(argv[2]) if len(argv) > 2 else 3
    keep_freed_memory()
    opts = ParseOptions(format="vw", bits=bits)
    data = np.fromfile(path, np.uint8, count=100 << 20)
    cuts, pos = [], 0
    while pos < len(data):
        e = min(len(data), pos + CHUNK)
        if e < len(data):
            nl = np.flatnonzero(data[pos:e] == 10)
            e = pos + int(nl[-1]) + 1 if len(nl) else e
        cuts.append((pos, e))
        pos = e
    table, flags = opts.interaction_table(), opts.namespace_flags()
    best, nnz = float("inf"), 0
    for _ in range(repeats):
        t0, nnz = time.process_time(), 0
        for s, e in cuts:
            nnz += len(parse_vw(data[s:e], opts.mask, table, opts.constant, False, *flags)[1])
        best = min(best, time.process_time() - t0)
    print(f"{path}: {best:.3f} CPU s, {best / max(nnz, 1) * 1e9:.1f} ns a feature, "
          f"{best / max(len(data), 1) * 1e9:.2f} ns a byte ({nnz} features, "
          f"{len(data) / 2**20:.0f} MiB)")
    n = 1 << 16
    tags = [f"t{i}" for i in range(n)]
    ptr = np.concatenate([[0], np.cumsum([len(t) for t in tags])]).astype(np.int64)
    blk = Block(start=0, indptr=np.zeros(n + 1, np.int64), indices=np.zeros(0, np.uint32),
                values=np.zeros(0, np.float32), labels=np.zeros(n, np.float32),
                weights=np.ones(n, np.float32), tag_ptr=ptr,
                tag_blob=np.frombuffer("".join(tags).encode(), np.uint8))
    pred = np.random.default_rng(0).normal(0, 1, n)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        prediction_lines(pred, block_tags(blk, 0, n))
        best = min(best, time.process_time() - t0)
    print(f"-p lines with tags: {best / n * 1e9:.0f} ns an example")


if __name__ == "__main__":
    main(sys.argv[1:])
