"""How bytes move between ranks: the interface (:mod:`.base`), TCP between any hosts
(:mod:`.tcp`), shared memory on one host (:mod:`.shm`), segment names (:mod:`.segments`)."""

from .base import Exchange, GroupView, Transport
from .connect import build_mesh, listen
from .tcp import TcpMesh

__all__ = ["Exchange", "GroupView", "TcpMesh", "Transport", "build_mesh", "listen"]
