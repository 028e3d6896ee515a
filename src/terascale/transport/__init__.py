"""How bytes move between ranks: the interface (:mod:`.base`), TCP between any hosts
(:mod:`.tcp`), shared memory on one host (:mod:`.shm`), segment names (:mod:`.segments`); every TCP link is authenticated (:mod:`._secure`'s modes,
``LINK_MODES``)."""

from ._secure import MODES as LINK_MODES
from ._secure import stronger as stronger_mode
from .base import Exchange, GroupView, Transport
from .connect import build_mesh, listen
from .tcp import TcpMesh

__all__ = ["Exchange", "GroupView", "LINK_MODES", "TcpMesh", "Transport", "build_mesh", "listen",
           "stronger_mode"]
