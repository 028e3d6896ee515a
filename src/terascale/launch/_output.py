"""A worker's output, forwarded live with its rank prefixed, its last lines kept."""

from __future__ import annotations

import os
import re
import select
import threading
from collections import deque
from typing import IO

__all__ = ["Output"]

_TAIL_LINES = 40
_LINE_BREAKS = re.compile(rb"(\r|\n)")
_PARTIAL_S = 0.1  # an unfinished line is shown once its worker has been quiet this long


class Output:
    """Forwards one worker pipe with a rank prefix on every line; keeps the last lines.

    Output is forwarded as it arrives, and a carriage return starts a new prefixed line too,
    so progress bars (tqdm redraws its line with ``\\r``) move live. Only an unfinished line
    is held back, until it ends or its worker is quiet for a moment: a line written in
    several pieces (``print(a, b)`` makes one write per piece) is not cut by other ranks'.
    """

    def __init__(self, rank: int, pipe: IO[bytes], sink: IO[bytes], lock: threading.Lock,
                 prefix: bool) -> None:
        self.tail: deque[bytes] = deque(maxlen=_TAIL_LINES)
        self._prefix = f"[{rank}] ".encode() if prefix else b""
        self._thread = threading.Thread(target=self._pump, args=(pipe, sink, lock), daemon=True)
        self._thread.start()

    def _pump(self, pipe: IO[bytes], sink: IO[bytes], lock: threading.Lock) -> None:
        at_start = True
        partial = b""
        forward = True  # until the launcher's own output is closed (terascale run ... | head)
        fd = pipe.fileno()
        held = b""  # the unfinished last line, not forwarded yet
        while True:
            if held and not select.select([fd], [], [], _PARTIAL_S)[0]:
                data, held = held, b""  # the worker is quiet: show its unfinished line
            else:
                data = os.read(fd, 65536)
                if not data:
                    if not held:
                        break
                    data, held = held, b""
                else:
                    lines = (partial + data).split(b"\n")
                    partial = lines.pop()[-4096:]
                    self.tail.extend(ln + b"\n" for ln in lines)
                    data = held + data
                    cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
                    if len(data) - cut > 65536:  # an endless line (binary output): pass it on
                        cut = len(data)
                    data, held = data[:cut], data[cut:]
                    if not data:
                        continue
            out = bytearray()
            for piece in _LINE_BREAKS.split(data):
                if not piece:
                    continue
                if at_start and piece not in (b"\r", b"\n"):
                    out += self._prefix
                out += piece
                at_start = piece in (b"\r", b"\n")
            try:
                if forward:
                    with lock:
                        sink.write(bytes(out))
                        sink.flush()
            except (BrokenPipeError, ValueError):  # the reader went away or closed the sink:
                forward = False  # keep draining, or the worker blocks on a full pipe forever
        if partial:
            self.tail.append(partial + b"\n")
        pipe.close()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
