"""How ranks find each other: a small authenticated server and its client."""

from .client import Assignment, join
from .server import RendezvousServer, host_layout

__all__ = ["Assignment", "RendezvousServer", "host_layout", "join"]
