"""``broadcast_object`` and ``allgather_object``: pickled Python objects over the array collectives."""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any

import numpy as np

from ._errors import ConfigError

if TYPE_CHECKING:
    from .transport import Exchange

__all__ = ["ObjectCollectives"]


def _pickle(obj: Any) -> tuple[bytes, Exception | None]:
    """``(pickle bytes, None)``, or ``(the error's text, the error)`` when ``obj`` cannot be pickled."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), None
    except Exception as e:  # pickling runs arbitrary __reduce__ code: any error is possible
        return f"{type(e).__name__}: {e}".encode(), e


class ObjectCollectives:
    """Mixin of :class:`terascale.Communicator`: the object collectives, built on
    ``broadcast``, ``allgather`` and the communicator's scheduler."""

    rank: int
    size: int
    broadcast: Any
    allgather: Any
    _schedule: Any
    _check_root: Any

    def broadcast_object(self, obj: Any = None, root: int = 0, *,
                         timeout: float | None = None) -> Any:
        """Pickle ``obj`` on ``root`` and return a copy of it on every rank.

        An object the root cannot pickle raises ConfigError on every rank (the root sends
        the reason instead of the payload), so nobody waits for bytes that never come.

        Parameters
        ----------
        obj
            On ``root``, any picklable object; ignored elsewhere (default None).
        root
            The rank whose object every rank gets (default 0).
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        self._check_root(root)
        payload, failed = (_pickle(obj) if self.rank == root else (b"", None))
        # A negative length announces that the payload is the root's pickling error.
        n = len(payload) if failed is None else -len(payload)
        n = int(self.broadcast(np.array([n], np.int64), root, timeout=timeout)[0])
        buf = np.frombuffer(payload, np.uint8).copy() if self.rank == root else \
            np.empty(abs(n), np.uint8)
        self.broadcast(buf, root, timeout=timeout)
        if n < 0:
            raise ConfigError(f"rank {self.rank}: broadcast_object: root rank {root} could not "
                              f"pickle its object: {buf.tobytes().decode()}") from failed
        return obj if self.rank == root else pickle.loads(buf.tobytes())

    def allgather_object(self, obj: Any, *, timeout: float | None = None) -> list[Any]:
        """Pickle ``obj`` on every rank; return the list of all ranks' objects in rank order.

        When some rank cannot pickle its object, every rank raises ConfigError naming it.

        Parameters
        ----------
        obj
            This rank's object (anything picklable; sizes may differ between ranks).
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        payload, failed = _pickle(obj)
        n = len(payload) if failed is None else -len(payload)  # negative: an error message
        signed = [int(s) for s in self.allgather(np.array(n, np.int64), timeout=timeout)]
        sizes = [abs(s) for s in signed]
        out = np.empty(sum(sizes), np.uint8)
        off = sum(sizes[: self.rank])
        out[off: off + len(payload)] = np.frombuffer(payload, np.uint8)

        def body(ex: Exchange | None) -> list[Any]:
            if ex is not None:
                from .collectives.allgather import RingAllgather

                RingAllgather(ex, self.rank, self.size, out, sizes).run()
            starts = [sum(sizes[:i]) for i in range(self.size)]
            blobs = [out[s: s + k].tobytes() for s, k in zip(starts, sizes)]
            bad = [f"rank {r}: {b.decode()}" for r, (b, k) in enumerate(zip(blobs, signed)) if k < 0]
            if bad:
                raise ConfigError(f"rank {self.rank}: allgather_object: could not pickle the "
                                  f"object of {'; '.join(bad)}") from failed
            return [pickle.loads(b) for b in blobs]

        return self._schedule("allgather_object", f"bytes[{sum(sizes)}]", body, timeout, False)
