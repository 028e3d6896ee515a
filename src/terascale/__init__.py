"""terascale: allreduce-based parallel learning.

>>> import terascale
>>> comm = terascale.init()              # size 1 outside a launcher
>>> comm.allreduce([1.0, 2.0]).tolist()
[1.0, 2.0]
"""

import typing as _typing

from ._errors import (
    AuthError,
    CollectiveError,
    CollectiveMismatch,
    ConfigError,
    DataError,
    PeerLost,
    PeerTimeout,
    RendezvousError,
    SlotTaken,
    StorageError,
    TerascaleError,
)
from ._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from ._async import Handle
    from ._checkpoint import Checkpoint
    from ._env import JobEnv, read_env
    from ._init import init
    from .communicator import Communicator

# The names a program reaches through ``terascale.X``, imported on first use (PEP 562): a
# process that only imports a subpackage (a one-worker ``terascale vw`` run, whose
# communicator has size 1) loads neither the collectives, the transport nor checkpoints.
_LAZY = {"Checkpoint": "._checkpoint", "Communicator": ".communicator", "Handle": "._async",
         "JobEnv": "._env", "init": "._init", "read_env": "._env"}


__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())


__version__ = "0.1.0"

__all__ = [
    "AuthError",
    "Checkpoint",
    "CollectiveError",
    "CollectiveMismatch",
    "Communicator",
    "ConfigError",
    "DataError",
    "Handle",
    "JobEnv",
    "PeerLost",
    "PeerTimeout",
    "RendezvousError",
    "SlotTaken",
    "StorageError",
    "TerascaleError",
    "__version__",
    "init",
    "read_env",
]
