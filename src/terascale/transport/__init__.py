"""How bytes move between ranks: the interface and the registry of transports
(:mod:`.base`: :class:`Transport`, :data:`TRANSPORTS`), TCP between any hosts (:mod:`.tcp`,
set up by :mod:`.connect`), ranks as threads of one process (:mod:`.inprocess`, for tests),
and beside them the shared memory of one host (:mod:`.shmgroup`, segment names in
:mod:`.segments`); every TCP link is authenticated (:mod:`._secure`'s modes,
``LINK_MODES``)."""

import warnings

from ._secure import MODES as LINK_MODES
from ._secure import stronger as stronger_mode
from .base import (
    TRANSPORTS,
    Connector,
    Exchange,
    GroupView,
    Transport,
    connector,
    register_transport,
)
from .connect import connect_tcp, listen
from .tcp import TcpTransport

__all__ = ["Connector", "Exchange", "GroupView", "LINK_MODES", "TRANSPORTS", "TcpTransport",
           "Transport", "connect_tcp", "connector", "listen", "register_transport",
           "stronger_mode"]

_DEPRECATED = {"TcpMesh": ("TcpTransport", TcpTransport), "build_mesh": ("connect_tcp", connect_tcp)}


def __getattr__(name: str) -> object:
    if name in _DEPRECATED:  # the names from before transports were called transports
        new, obj = _DEPRECATED[name]
        warnings.warn(f"terascale.transport.{name} is deprecated: use {new}", DeprecationWarning,
                      stacklevel=2)
        return obj
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
