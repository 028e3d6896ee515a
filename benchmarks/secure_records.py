"""CPU time per frame through authenticated links, in one process over a socket pair.

Sends one frame (a 128-byte header and a payload, as the mesh's two-rank swap sends it)
from one end of a socket pair and receives it at the other, header and payload scattered
into the receiver's buffers, in five link modes: ``plain`` (the bare sockets),
``integrity`` (the default: the MAC two ends of this build agree on, AEGISMAC-128X4 with
the compiled record layer on a CPU with AES instructions, else GMAC), ``integrity-gmac``
(GMAC records, the floor every build runs), ``encrypt`` (the cipher two ends of this
build agree on: AEGIS-256X4 with the compiled record layer, else AES-256-GCM) and
``encrypt-gcm`` (AES-256-GCM records, the floor every build runs). Reports
the process's CPU time per frame sent and received, median of RUNS runs (5 by default):
CPU time, not wall time, so it holds on a loaded machine. Then the large-message case
(:func:`stream_ms`): 64 MiB streamed in 1 MiB frames from one buffer into another, neither
in the caches, CPU time of the sending and the receiving calls apart.

    python benchmarks/secure_records.py            # 4 KiB and 1 MiB frames
    RUNS=9 python benchmarks/secure_records.py
    TERASCALE_NO_CEXT=1 python benchmarks/secure_records.py   # without the compiled records
"""

from __future__ import annotations

import os
import socket
import statistics
import time

import numpy as np

from terascale.transport._secure import GCM, SecureLink, ciphers

HEADER = 128
MODES = ("plain", "integrity", "integrity-gmac", "encrypt", "encrypt-gcm")


def _pair(mode: str) -> tuple:
    a, b = socket.socketpair()
    for s in (a, b):
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    if mode == "plain":
        return a, b
    nonces, enc = os.urandom(64), mode.startswith("encrypt")
    cipher = GCM if mode.endswith("-gcm") or mode.endswith("-gmac") else \
        ciphers("encrypt" if enc else "integrity")[0]
    return (SecureLink(a, b"secret", nonces, "job", dialer=0, acceptor=1, rank=0, peer=1,
                       encrypt=enc, cipher=cipher),
            SecureLink(b, b"secret", nonces, "job", dialer=0, acceptor=1, rank=1, peer=0,
                       encrypt=enc, cipher=cipher))


def _advance(views: list[memoryview], k: int) -> None:
    while k:
        if k >= len(views[0]):
            k -= len(views.pop(0))
        else:
            views[0], k = views[0][k:], 0


def per_frame_us(mode: str, size: int, iters: int) -> float:
    """CPU microseconds to send and receive one frame of ``size`` payload bytes."""
    tx, rx = _pair(mode)
    head, rhead = bytearray(HEADER), bytearray(HEADER)
    payload = np.ones(size // 4, np.float32)
    into = np.empty_like(payload)
    total = HEADER + size
    flush = getattr(tx, "flush", None)

    def frame() -> None:
        views = [memoryview(head), memoryview(payload).cast("B")]
        rbufs = [memoryview(rhead), memoryview(into).cast("B")]
        sent = got = 0
        while got < total:
            if sent < total:
                try:
                    k = tx.sendmsg(views)
                except BlockingIOError:
                    k = 0
                sent += k
                _advance(views, k)
            if flush is not None:
                flush()
            try:
                k = rx.recvmsg_into(rbufs)[0]
            except BlockingIOError:
                k = 0
            got += k
            _advance(rbufs, k)

    for _ in range(max(3, iters // 10)):
        frame()
    t = time.process_time()
    for _ in range(iters):
        frame()
    return (time.process_time() - t) / iters * 1e6


def stream_ms(mode: str, total: int = 64 << 20, frame: int = 1 << 20) -> tuple[float, float]:
    """CPU milliseconds (sending, receiving) to stream ``total`` bytes in frames of ``frame``
    from one buffer into another, both pushed out of the caches first: the large-message
    case, where every byte is read from memory once (as a ring allreduce's first step
    sends its own segment), unlike :func:`per_frame_us`, which resends one hot payload."""
    tx, rx = _pair(mode)
    src = np.ones(total // 4, np.float32)
    dst = np.zeros_like(src)
    evict = np.ones(total // 4, np.float32)
    head, rhead = bytearray(HEADER), bytearray(HEADER)
    sv, dv = memoryview(src).cast("B"), memoryview(dst).cast("B")
    flush = getattr(tx, "flush", None)
    spent = [0.0, 0.0]
    evict += 1  # a first pass touches every page; then the caches hold none of src, dst
    for off in range(0, total, frame):
        views = [memoryview(head), sv[off: off + frame]]
        rbufs = [memoryview(rhead), dv[off: off + frame]]
        size, sent, got = HEADER + len(views[1]), 0, 0
        while got < size:
            t = time.process_time()
            if sent < size:
                try:
                    k = tx.sendmsg(views)
                except BlockingIOError:
                    k = 0
                sent += k
                _advance(views, k)
                if flush is not None:
                    flush()
            t2 = time.process_time()
            try:
                k = rx.recvmsg_into(rbufs)[0]
            except BlockingIOError:
                k = 0
            spent[0] += t2 - t
            spent[1] += time.process_time() - t2
            got += k
            _advance(rbufs, k)
    if not np.array_equal(src, dst):
        raise AssertionError(f"{mode}: the streamed bytes differ")
    return spent[0] * 1e3, spent[1] * 1e3


def main() -> None:
    runs = int(os.environ.get("RUNS", "5"))
    print(f"| frame | mode | CPU us per frame (median of {runs}) | x plain | all runs |")
    print("|-------|------|------|------|------|")
    for label, size, iters in (("4 KiB", 4096, 20000), ("1 MiB", 1 << 20, 300)):
        base = 0.0
        for mode in MODES:
            xs = sorted(per_frame_us(mode, size, iters) for _ in range(runs))
            med = statistics.median(xs)
            base = base or med
            print(f"| {label} | {mode} | {med:.1f} | {med / base:.2f} | "
                  f"{' '.join(f'{x:.1f}' for x in xs)} |", flush=True)
    print(f"\n| 64 MiB in 1 MiB frames, cold | mode | CPU ms send | receive | total "
          f"(median of {runs}) | x plain |")
    print("|------|------|------|------|------|------|")
    base = 0.0
    for mode in MODES:
        xs = [stream_ms(mode) for _ in range(runs)]
        send = statistics.median(x[0] for x in xs)
        recv = statistics.median(x[1] for x in xs)
        med = statistics.median(x[0] + x[1] for x in xs)
        base = base or med
        print(f"| 64 MiB | {mode} | {send:.1f} | {recv:.1f} | {med:.1f} | {med / base:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
