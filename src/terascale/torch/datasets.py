"""Fashion-MNIST from the IDX files of Debian's ``dataset-fashion-mnist`` package.

Reads ``{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz`` (Xiao, Rasul, Vollgraf 2017) from
``/usr/share/datasets/fashion-mnist`` or any directory holding the same files.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from .._errors import DataError

__all__ = ["DEFAULT_ROOT", "fashion_mnist"]

DEFAULT_ROOT = "/usr/share/datasets/fashion-mnist"


def _idx(path: Path, ndim: int) -> np.ndarray:
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; the four Fashion-MNIST files "
                        "(train-images-idx3-ubyte.gz, ...) come with Debian's "
                        "dataset-fashion-mnist package or from "
                        "https://github.com/zalandoresearch/fashion-mnist (data/fashion): put "
                        "them in one directory and pass it as root= (--data DIR)") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    magic = int.from_bytes(raw[:4], "big")
    if magic != 0x0800 + ndim or len(raw) < 4 + 4 * ndim:
        raise DataError(f"{path}: not an IDX file of {ndim} dimension(s) (magic {magic:#x})")
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    body = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise DataError(f"{path}: {body.size} bytes of data, the header says {dims}")
    return body.reshape(dims)


def fashion_mnist(train: bool = True, root: str | Path = DEFAULT_ROOT,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Images as float32 ``(N, 1, 28, 28)`` scaled to [0, 1] and normalized, labels int64.

    Parameters
    ----------
    train
        The 60,000 training images (default True) or the 10,000 test images.
    root
        The directory of the four ``*-ubyte.gz`` files (default: where Debian's package puts them).
    """
    prefix = "train" if train else "t10k"
    root = Path(root)
    images = _idx(root / f"{prefix}-images-idx3-ubyte.gz", 3)
    labels = _idx(root / f"{prefix}-labels-idx1-ubyte.gz", 1)
    if len(images) != len(labels):
        raise DataError(f"{root}: {len(images)} images but {len(labels)} labels")
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    x = (x - 0.2860) / 0.3530  # the training set's mean and standard deviation
    return x, torch.from_numpy(labels.astype(np.int64))
