"""Atomic checkpoints that every rank agrees on: the restart half of "fail fast, restart".

Rabit-style in-collective recovery proved fragile; terascale instead stops the whole job on
any failure and restarts it (``terascale run --max-restarts K``, Spark stage retry, Ray group
restart). Because the collectives are deterministic, a run restarted from checkpoint ``k``
ends bitwise identical to a run that never failed.

* ``save(step, state)``: all ranks call it; they must agree on ``step`` (checked). Rank 0
  writes ``state`` (numpy arrays, torch state dicts, plain Python) to a temporary file,
  fsyncs it, renames it into place, then moves the ``LATEST`` pointer the same way; a crash
  at any point leaves the previous checkpoint intact. A barrier then makes the commit
  visible to every rank before training goes on.
* ``load()``: rank 0 reads the newest checkpoint whose checksum verifies and broadcasts it,
  so only rank 0 needs to see the directory (it must survive restarts: a shared or local
  persistent path).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._errors import CollectiveMismatch, ConfigError, TerascaleError
from .communicator import Communicator

__all__ = ["Checkpoint"]

_NAME = re.compile(r"^step-(\d{12})\.ckpt$")
_MAGIC = b"TSCKPT1\n"


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)  # make the rename itself durable
    finally:
        os.close(dfd)


class Checkpoint:
    """Checkpoints of one job in ``directory``; keeps the newest ``keep`` of them."""

    def __init__(self, directory: str | os.PathLike[str], comm: Communicator | None = None, *,
                 keep: int = 2) -> None:
        if keep < 1:
            raise ConfigError(f"keep={keep} must be at least 1")
        self.directory = Path(directory)
        self.comm = comm if comm is not None else Communicator()
        self.keep = keep
        if self.comm.rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)

    def _steps(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _NAME.match(n)))

    def _path(self, step: int) -> Path:
        return self.directory / f"step-{step:012d}.ckpt"

    def save(self, step: int, state: Mapping[str, Any]) -> None:
        """Commit ``state`` as checkpoint ``step`` (every rank calls this with the same step)."""
        if not isinstance(step, int) or step < 0:
            raise ConfigError(f"step={step!r} must be a non-negative integer")
        steps = self.comm.allgather_object(step)
        if len(set(steps)) != 1:
            raise CollectiveMismatch(f"rank {self.comm.rank}: checkpoint save: ranks disagree on "
                                     f"the step: {steps}", rank=self.comm.rank,
                                     operation="checkpoint")
        if self.comm.rank == 0:
            body = pickle.dumps(dict(state), protocol=pickle.HIGHEST_PROTOCOL)
            digest = hashlib.sha256(body).digest()
            _atomic_write(self._path(step), _MAGIC + digest + body)
            _atomic_write(self.directory / "LATEST", f"{step}\n".encode())
            for old in self._steps()[: -self.keep]:
                try:
                    os.unlink(self._path(old))
                except OSError:
                    pass
        self.comm.barrier()

    def _read(self, step: int) -> dict[str, Any] | None:
        try:
            raw = self._path(step).read_bytes()
        except OSError:
            return None
        head = len(_MAGIC) + 32
        if raw[: len(_MAGIC)] != _MAGIC or hashlib.sha256(raw[head:]).digest() != raw[len(_MAGIC):head]:
            return None  # torn or corrupt: fall back to an older checkpoint
        state: dict[str, Any] = pickle.loads(raw[head:])
        return state

    def load(self) -> tuple[int, dict[str, Any]] | None:
        """The newest valid checkpoint as ``(step, state)`` on every rank, or None."""
        found: tuple[int, dict[str, Any]] | None = None
        if self.comm.rank == 0:
            for step in reversed(self._steps()):
                state = self._read(step)
                if state is not None:
                    found = (step, state)
                    break
        try:
            return self.comm.broadcast_object(found, root=0)
        except pickle.PicklingError as e:  # pragma: no cover - state pickled fine on save
            raise TerascaleError(f"checkpoint could not be shared: {e}") from None

    @property
    def latest_step(self) -> int | None:
        """Newest committed step in the directory (as this rank sees it), or None."""
        steps = self._steps()
        return steps[-1] if steps else None
