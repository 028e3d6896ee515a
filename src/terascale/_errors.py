"""The one exception tree of terascale.

::

    TerascaleError
    ├── CollectiveError          a collective could not complete
    │   ├── PeerTimeout          a peer did not answer before the deadline
    │   ├── PeerLost             a peer's process or connection went away
    │   └── CollectiveMismatch   ranks called different collectives
    ├── RendezvousError          the job could not be assembled
    │   └── SlotTaken            another copy of this worker holds its slot
    ├── AuthError                a peer failed the challenge on the job secret
    │   └── LinkTampered         a record failed its tag (also a CollectiveError)
    ├── DataError                bad input data (names the file and line)
    ├── StorageError             a file could not be written or read
    └── ConfigError              bad options or environment (names the flag)

Every message names the rank that raised it and, where there is one, the peer and the
operation, so that a failure in a 100-rank job can be read from any single rank's log.
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "CollectiveError",
    "CollectiveMismatch",
    "ConfigError",
    "DataError",
    "LinkTampered",
    "PeerLost",
    "PeerTimeout",
    "RendezvousError",
    "SlotTaken",
    "StorageError",
    "TerascaleError",
]


class TerascaleError(Exception):
    """Base class of every error terascale raises on purpose."""


class CollectiveError(TerascaleError):
    """A collective operation could not complete on this rank.

    Parameters
    ----------
    message
        What failed, beginning with the rank (``"rank 2: allreduce: ..."``).
    rank
        The rank that raised it (None: unknown).
    peer
        The peer the failure is blamed on (None: no single peer).
    operation
        The collective that failed, e.g. ``"allreduce"``.
    """

    def __init__(self, message: str, *, rank: int | None = None, peer: int | None = None,
                 operation: str | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.peer = peer
        self.operation = operation


class PeerTimeout(CollectiveError):
    """A peer did not send or accept data before the deadline (stalled or overloaded)."""


class PeerLost(CollectiveError):
    """A peer's connection closed or reset: its process died or it aborted the job."""


class CollectiveMismatch(CollectiveError):
    """Ranks disagree on the collective being run (operation, shape, dtype, op, root or order)."""


class RendezvousError(TerascaleError):
    """The job could not be assembled: the server is unreachable or not all ranks arrived."""


class SlotTaken(RendezvousError):
    """Another copy of this worker (same slot) joined first; this copy is redundant."""


class AuthError(TerascaleError):
    """A connection failed the challenge on the job secret."""


class LinkTampered(AuthError, CollectiveError):
    """A link's record failed authentication: altered, replayed or reordered on the wire.

    Also a :class:`CollectiveError`, so the collective that received it aborts the job."""


class DataError(TerascaleError, ValueError):
    """Malformed input data; the message names the file and line (or row and column).

    Also a ``ValueError``, as scikit-learn's tools expect of a bad input value."""


class StorageError(TerascaleError, OSError):
    """A checkpoint or model file could not be written or read; the message names the path.

    Also an ``OSError`` (with the original ``errno``), for code that handles a full disk."""


class ConfigError(TerascaleError, ValueError):
    """Bad option or environment; the message names the flag or variable and what to do."""
