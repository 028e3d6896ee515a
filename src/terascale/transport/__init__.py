"""How bytes move between two ranks: TCP between any hosts, shared memory on one host."""

from .connect import build_mesh, listen
from .tcp import Exchange, TcpMesh

__all__ = ["Exchange", "TcpMesh", "build_mesh", "listen"]
