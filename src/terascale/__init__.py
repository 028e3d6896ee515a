"""terascale: allreduce-based parallel learning.

>>> import terascale
>>> comm = terascale.init()              # size 1 outside a launcher
>>> comm.allreduce([1.0, 2.0]).tolist()
[1.0, 2.0]
"""

from ._async import Handle
from ._checkpoint import Checkpoint
from ._env import JobEnv, read_env
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
from ._init import init
from .communicator import Communicator

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
