"""Atomic checkpoints that every rank agrees on: the restart half of "fail fast, restart".

Rabit-style in-collective recovery proved fragile; terascale instead stops the whole job on
any failure and restarts it (``terascale run --max-restarts K``, Spark stage retry, Ray group
restart). Because the collectives are deterministic, a run restarted from checkpoint ``k``
ends bitwise identical to a run that never failed.

* ``save(step, state)``: all ranks call it; they must agree on ``step`` (checked). Rank 0
  writes ``state`` (numpy arrays, torch state dicts, plain Python) to a temporary file,
  fsyncs it, renames it into place and fsyncs the directory, then moves the ``LATEST``
  pointer the same way; a crash at any point leaves the previous checkpoint intact. Rank 0
  then tells every rank that the commit happened (or why it failed: a full disk is a
  :class:`~terascale.StorageError` naming the path on every rank, not a hang).
* ``load()``: rank 0 reads the newest checkpoint whose checksum verifies and broadcasts it,
  so only rank 0 needs to see the directory (it must survive restarts: a shared or local
  persistent path). A newer checkpoint that does not verify is logged (logger
  ``terascale.checkpoint``, naming the file) before the older one is used.

"Newest" is write order, not step number: every file carries a sequence number one above
the highest in the directory when it was written. A run that fell back to step 5 (or
started afresh) and goes on to write step 6 therefore keeps its own checkpoints, even
though a step-10 file of the earlier run is still there; pruning keeps the ``keep``
newest by that order and so never removes what the current run has just written.

Temporary files of saves that were killed (``.step-*.ckpt.*.tmp``, ``.LATEST.*.tmp``) are
removed by the next ``save`` or ``load``: only one job writes a checkpoint directory.

Trust: a checkpoint is a pickle, as trusted as the job's own code. ``load`` unpickles on
rank 0 only a regular file that this user owns and that no other user may write, in a
directory that this user owns and no other user may write (else ``ConfigError`` on every
rank): someone who can add, rename or remove entries there could hand back an older state
under a newer step's name, or stall ``load`` on a FIFO. Rank 0 creates the directory
private (``0700``); the files are read through the descriptor of the directory that was
checked, never through its path again. The other ranks receive the state over the job's
authenticated links (``broadcast_object``), never from the disk or the network unchecked. The checksum guards
against torn writes, not against a writer: copy checkpoints from elsewhere only as you
would copy code.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import re
import stat
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._errors import CollectiveMismatch, ConfigError, StorageError, TerascaleError
from ._files import replace_durably, storage_error
from .communicator import Communicator

__all__ = ["Checkpoint"]

log = logging.getLogger("terascale.checkpoint")

_NAME = re.compile(r"^step-(\d{12})\.ckpt$")
_STALE = re.compile(r"^\.(?:step-\d{12}\.ckpt|LATEST)\..+\.tmp$")
_MAGIC_V1 = b"TSCKPT1\n"  # magic, sha256(body), body
_MAGIC = b"TSCKPT2\n"     # magic, sequence u64, sha256(sequence + body), body
_SEQ = struct.Struct("<Q")
_HEAD = len(_MAGIC) + _SEQ.size + 32


def _owned(path: Path, st: os.stat_result, what: str = "rank 0: checkpoint load") -> None:
    """Refuse a checkpoint (or its directory) that someone else could have written: it is a
    pickle, and unpickling runs whatever code its writer put in it."""
    uid = os.geteuid()
    if st.st_uid not in (uid, 0) or st.st_mode & 0o022:
        kind = "the checkpoint directory" if stat.S_ISDIR(st.st_mode) else "it"
        raise ConfigError(
            f"{what}: {path} is owned by uid {st.st_uid} with mode "
            f"{st.st_mode & 0o777:03o}, so another user could have written {kind}; a "
            "checkpoint is a pickle, which runs code when loaded: it must belong to this "
            f"user (uid {uid}) and not be group- or world-writable (chmod go-w)")


_OPEN = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO opens at once, then is refused


class Checkpoint:
    """Checkpoints of one job in ``directory``; keeps the newest ``keep`` of them.

    Parameters
    ----------
    directory
        Where checkpoints live (created by rank 0); the same path on every rank, shared storage when
        ranks run on several hosts.
    comm
        The job's communicator (default None: a job of one process); rank 0 writes, every rank
        agrees on what was saved and loaded.
    keep
        How many of the newest checkpoints to keep (default 2, at least 1); older ones are deleted
        after a save commits.
    """

    def __init__(self, directory: str | os.PathLike[str], comm: Communicator | None = None, *,
                 keep: int = 2) -> None:
        if keep < 1:
            raise ConfigError(f"keep={keep} must be at least 1")
        self.directory = Path(directory)
        self.comm = comm if comm is not None else Communicator()
        self.keep = keep
        if self.comm.rank == 0:
            try:
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as e:
                raise storage_error("rank 0: checkpoint: cannot create the directory",
                                    self.directory, e) from None

    # -- the directory (rank 0) --------------------------------------------------------------
    def _path(self, step: int) -> Path:
        return self.directory / f"step-{step:012d}.ckpt"

    def _open_dir(self, what: str) -> int | None:
        """A descriptor of the directory, checked (:func:`_owned`); None when it is missing.
        Everything read from it goes through this descriptor, so the directory checked is
        the one read even if its path is swapped meanwhile."""
        try:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise storage_error(f"rank {self.comm.rank}: {what}: cannot open",
                                self.directory, e) from None
        try:
            _owned(self.directory, os.fstat(fd), f"rank {self.comm.rank}: {what}")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _names(self, what: str, fd: int | None = None) -> list[str]:
        try:
            return os.listdir(self.directory if fd is None else fd)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise storage_error(f"rank {self.comm.rank}: {what}: cannot list",
                                self.directory, e) from None

    def _entries(self, what: str) -> list[tuple[int, int, Path]]:
        """``(sequence, step, path)`` of every checkpoint file, oldest write first.

        Files of the first format (no sequence number) count as older than any other; a
        file whose header cannot be read sorts first too (``load`` reports it if reached).
        """
        fd = self._open_dir(what)
        if fd is None:
            return []
        try:
            return self._list(what, fd)
        finally:
            os.close(fd)

    def _list(self, what: str, dir_fd: int) -> list[tuple[int, int, Path]]:
        found = []
        for name in self._names(what, dir_fd):
            if not (m := _NAME.match(name)):
                continue
            path = self.directory / name
            try:
                with self._open(path, dir_fd) as f:
                    if f is None:
                        continue
                    head = f.read(len(_MAGIC) + _SEQ.size)
            except FileNotFoundError:
                continue
            except OSError as e:
                raise storage_error(f"rank {self.comm.rank}: {what}: cannot read", path,
                                    e) from None
            seq = _SEQ.unpack_from(head, len(_MAGIC))[0] if (
                head[: len(_MAGIC)] == _MAGIC and len(head) == len(_MAGIC) + _SEQ.size) else -1
            found.append((seq, int(m.group(1)), path))
        return sorted(found)

    def _remove_stale(self, what: str) -> None:
        for name in self._names(what):
            if _STALE.match(name):
                try:
                    os.unlink(self.directory / name)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise storage_error(f"rank {self.comm.rank}: {what}: cannot remove the "
                                        "stale temporary file", self.directory / name,
                                        e) from None

    def _commit(self, step: int, state: Mapping[str, Any]) -> None:
        what = "rank 0: checkpoint save: "
        entries = self._entries("checkpoint save")  # the directory checked first
        self._remove_stale("checkpoint save")
        seq = max((e[0] for e in entries), default=-1) + 1
        body = pickle.dumps(dict(state), protocol=pickle.HIGHEST_PROTOCOL)
        head = _SEQ.pack(seq)
        digest = hashlib.sha256(head + body).digest()
        path = self._path(step)

        def write(f: Any) -> None:
            fd = f.fileno()
            for chunk in (_MAGIC, head, digest, memoryview(body)):
                while chunk:  # os.write may write less than asked (signals, quotas)
                    chunk = chunk[os.write(fd, chunk):]

        replace_durably(path, write, prefix=f".{path.name}.", what=what)
        replace_durably(self.directory / "LATEST", lambda f: f.write(f"{step}\n".encode()),
                        prefix=".LATEST.", what=what)
        entries = [e for e in self._entries("checkpoint save") if e[2] != path]
        for _, _, old in entries[: max(len(entries) + 1 - self.keep, 0)]:
            try:
                os.unlink(old)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise storage_error(f"{what}cannot remove the old checkpoint", old, e) from None

    @staticmethod
    def _open(path: Path, dir_fd: int) -> Any:
        """``path`` (an entry of the directory ``dir_fd``) opened for reading, or a context of
        None when it is not a regular file (a FIFO, a device: never read, never waited on)."""
        fd = os.open(path.name, _OPEN, dir_fd=dir_fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            log.warning("%s is not a regular file; ignored", path)
            return contextlib.nullcontext(None)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")

    def _read(self, path: Path, dir_fd: int) -> dict[str, Any] | None:
        try:
            with self._open(path, dir_fd) as f:
                if f is None:
                    return None
                _owned(path, os.fstat(f.fileno()))
                raw = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise storage_error("rank 0: checkpoint load: cannot read", path, e) from None
        if raw[: len(_MAGIC)] == _MAGIC:
            head, body = raw[len(_MAGIC): len(_MAGIC) + _SEQ.size], raw[_HEAD:]
            ok = hashlib.sha256(head + body).digest() == raw[_HEAD - 32: _HEAD]
        elif raw[: len(_MAGIC_V1)] == _MAGIC_V1:
            body = raw[len(_MAGIC_V1) + 32:]
            ok = hashlib.sha256(body).digest() == raw[len(_MAGIC_V1): len(_MAGIC_V1) + 32]
        else:
            ok = False
        if not ok:
            return None
        state: dict[str, Any] = pickle.loads(body)
        return state

    def _find(self) -> tuple[int, dict[str, Any]] | None:
        fd = self._open_dir("checkpoint load")
        if fd is None:
            return None
        try:
            self._remove_stale("checkpoint load")
            for _, step, path in reversed(self._list("checkpoint load", fd)):
                state = self._read(path, fd)
                if state is not None:
                    return step, state
                if path.exists():
                    log.warning("checkpoint %s is torn or corrupt (checksum mismatch); falling "
                                "back to an older checkpoint", path)
            return None
        finally:
            os.close(fd)

    # -- collective API ----------------------------------------------------------------------
    def save(self, step: int, state: Mapping[str, Any]) -> None:
        """Commit ``state`` as checkpoint ``step`` (every rank calls this with the same step).

        Parameters
        ----------
        step
            The checkpoint's number (an int >= 0, the same on every rank); :meth:`load` returns the
            highest.
        state
            A mapping of names to picklable values (arrays, model and optimizer state dicts), as
            rank 0 holds it.
        """
        if not isinstance(step, int) or step < 0:
            raise ConfigError(f"step={step!r} must be a non-negative integer")
        steps = self.comm.allgather_object(step)
        if len(set(steps)) != 1:
            raise CollectiveMismatch(f"rank {self.comm.rank}: checkpoint save: ranks disagree on "
                                     f"the step: {steps}", rank=self.comm.rank,
                                     operation="checkpoint")
        failure: tuple[int | None, str, str] | None = None
        if self.comm.rank == 0:
            try:
                self._commit(step, state)
            except (StorageError, ConfigError) as e:
                failure = (getattr(e, "errno", None), str(e), type(e).__name__)
        # Every rank learns the outcome: a full disk on rank 0 fails the job everywhere.
        self._raise(self.comm.broadcast_object(failure, root=0))

    def _raise(self, failure: tuple[int | None, str, str] | None) -> None:
        if failure is not None:
            message = failure[1] if self.comm.rank == 0 else f"rank {self.comm.rank}: {failure[1]}"
            if failure[2] == "ConfigError":
                raise ConfigError(message)
            err = StorageError(message)
            err.errno = failure[0]
            raise err

    def load(self) -> tuple[int, dict[str, Any]] | None:
        """The newest valid checkpoint as ``(step, state)`` on every rank, or None."""
        found: tuple[int, dict[str, Any]] | None = None
        failure: tuple[int | None, str, str] | None = None
        if self.comm.rank == 0:
            try:
                found = self._find()
            except (StorageError, ConfigError) as e:
                failure = (getattr(e, "errno", None), str(e), type(e).__name__)
        try:
            failure, found = self.comm.broadcast_object((failure, found), root=0)
        except pickle.PicklingError as e:  # pragma: no cover - state pickled fine on save
            raise TerascaleError(f"checkpoint could not be shared: {e}") from None
        self._raise(failure)
        return found

    @property
    def latest_step(self) -> int | None:
        """Step of the newest checkpoint written to the directory (as this rank sees it)."""
        entries = self._entries("checkpoint")
        return entries[-1][1] if entries else None
