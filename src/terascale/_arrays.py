"""Array plumbing shared by the collectives: reduction ops, dtype rules, torch interop.

Collectives work on flat, C-contiguous numpy buffers. These helpers turn what a user
passes (any numpy array, CPU or CUDA torch tensor, Python scalar) into such a buffer and
turn the result back into the user's type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._errors import ConfigError

__all__ = ["OPS", "Reducer", "as_array", "check_plain", "describe", "reducer", "restore",
           "write_back"]

OPS = ("sum", "prod", "min", "max")

Reducer = Callable[[np.ndarray, np.ndarray], None]
"""``reduce(acc, other)``: ``acc = op(acc, other)`` in place, elementwise."""

_NUMPY_OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}
# On booleans, sum and max are "any" (logical or), prod and min are "all" (logical and).
_BOOL_OPS = {"sum": np.logical_or, "prod": np.logical_and, "min": np.logical_and,
             "max": np.logical_or}


def reducer(op: str, dtype: np.dtype) -> Reducer:
    """The in-place elementwise reduction for ``op`` on ``dtype``; ConfigError if unknown."""
    if op not in _NUMPY_OPS:
        raise ConfigError(f"op={op!r} is not a reduction; use one of {', '.join(OPS)}")
    if dtype.kind not in "biufc":
        raise ConfigError(f"dtype {dtype} cannot be reduced; use a numeric or bool dtype")
    ufunc = (_BOOL_OPS if dtype.kind == "b" else _NUMPY_OPS)[op]

    def reduce(acc: np.ndarray, other: np.ndarray) -> None:
        ufunc(acc, other, out=acc)

    return reduce


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
