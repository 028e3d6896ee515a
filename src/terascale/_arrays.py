"""Array plumbing shared by the collectives: reduction ops, dtype rules, torch interop.

Collectives work on flat, C-contiguous numpy buffers. These helpers turn what a user
passes (any numpy array, CPU or CUDA torch tensor, Python scalar) into such a buffer and
turn the result back into the user's type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._errors import ConfigError

__all__ = ["OPS", "ReduceOp", "as_array", "check_plain", "describe", "restore", "write_back"]

OPS = ("sum", "prod", "min", "max")

_NUMPY_OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}
# On booleans, sum and max are "any" (logical or), prod and min are "all" (logical and).
_BOOL_OPS = {"sum": np.logical_or, "prod": np.logical_and, "min": np.logical_and,
             "max": np.logical_or}


class ReduceOp:
    """An elementwise reduction tagged with its name and dtype: the one form every
    algorithm uses (the tree and the ring call it, shared memory folds with it).

    ``op(acc, other)`` reduces in place (``acc = acc op other``); :meth:`fold` reduces a
    list left to right, the fixed order that keeps results bitwise reproducible. Raises
    ConfigError for an unknown op or a dtype that cannot be reduced.
    """

    __slots__ = ("dtype", "name", "ufunc")

    def __init__(self, name: str, dtype: np.dtype) -> None:
        if name not in _NUMPY_OPS:
            raise ConfigError(f"op={name!r} is not a reduction; use one of {', '.join(OPS)}")
        dtype = np.dtype(dtype)
        if dtype.kind not in "biufc":
            raise ConfigError(f"dtype {dtype} cannot be reduced; use a numeric or bool dtype")
        self.name = name
        self.dtype = dtype
        self.ufunc = (_BOOL_OPS if dtype.kind == "b" else _NUMPY_OPS)[name]

    def __call__(self, acc: np.ndarray, other: np.ndarray) -> None:
        self.ufunc(acc, other, out=acc)

    def fold(self, parts: list[np.ndarray], out: np.ndarray) -> None:
        """``out = parts[0] op parts[1] op ...``, left to right."""
        if len(parts) == 1:
            np.copyto(out, parts[0])
            return
        self.ufunc(parts[0], parts[1], out=out)
        for p in parts[2:]:
            self.ufunc(out, p, out=out)

    def __repr__(self) -> str:
        return f"ReduceOp({self.name!r}, {self.dtype})"


def check_plain(a: np.ndarray, what: str) -> None:
    """ConfigError unless ``a``'s bytes are its values: no object or structured dtypes.

    Object arrays hold pointers into this process's heap (meaningless, even dangerous, on
    another rank); structured records may hide objects and padding. Use
    ``broadcast_object`` / ``allgather_object`` for such data.
    """
    if a.dtype.hasobject or a.dtype.fields is not None:
        raise ConfigError(f"{what}: dtype {a.dtype} cannot be communicated as an array; use "
                          "a numeric, bool or string dtype, or broadcast_object / "
                          "allgather_object")


def as_array(x: Any) -> tuple[np.ndarray, Any]:
    """Return a numpy view or copy of ``x`` and a token that :func:`restore` uses.

    torch tensors on the CPU are viewed without a copy; tensors on an accelerator are
    copied to host memory (the token remembers the device to copy the result back).
    """
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch  # only when the caller already uses torch

        if not isinstance(x, torch.Tensor):
            raise ConfigError(f"cannot communicate a {type(x).__name__}")
        t = x.detach()
        dev = t.device
        if t.dtype == torch.bfloat16:
            raise ConfigError("bfloat16 tensors are not supported; convert to float32 or float16")
        host = t.cpu() if dev.type != "cpu" else t
        try:
            return host.numpy(), ("torch", dev)
        except (TypeError, RuntimeError) as e:  # sparse layouts, conjugate/negative bits
            raise ConfigError(f"cannot communicate this tensor: {e}") from None
    if isinstance(x, np.ndarray):
        return x, None
    return np.asarray(x), None


def restore(result: np.ndarray, token: Any) -> Any:
    """Turn a numpy result back into the caller's type (see :func:`as_array`)."""
    if token is None:
        return result
    import torch

    t = torch.from_numpy(result)
    _, dev = token
    return t if dev.type == "cpu" else t.to(dev)


def write_back(dest: Any, token: Any, result: np.ndarray) -> None:
    """Copy ``result`` into ``dest`` where :func:`as_array` gave a host copy (accelerator tensors).

    Numpy arrays and CPU tensors are viewed in place, so there is nothing to do for them.
    """
    if token is None or token[1].type == "cpu":
        return
    import torch

    with torch.no_grad():  # dest may be a parameter that requires grad
        dest.copy_(torch.from_numpy(result))


def describe(a: np.ndarray) -> str:
    """``float32[4,5]``: the short form used in error messages and mismatch headers."""
    return f"{a.dtype}[{','.join(str(d) for d in a.shape)}]"
