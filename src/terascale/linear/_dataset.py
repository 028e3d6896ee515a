"""The in-memory form of a data shard: hashed sparse rows (CSR) with labels and weights.

Every reader produces a :class:`Dataset`; the cache stores exactly these arrays; the
learners read only them. Indices are already masked to ``bits`` and include VW's constant
(bias) feature and any quadratic (``-q``) crosses, so a learner never hashes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._errors import ConfigError
from ._names import opt

__all__ = ["Dataset", "ParseOptions"]

FORMATS = ("vw", "libsvm", "csv")


@dataclass(frozen=True, kw_only=True)
class ParseOptions:
    """How text becomes hashed features; saved in the model so that predict parses alike."""

    format: str = "vw"
    bits: int = 18
    quadratic: tuple[str, ...] = ()
    constant: bool = True          # VW's bias feature
    label: str = "label"           # CSV: the label column
    categorical: tuple[str, ...] = ()  # CSV: columns hashed as categories even if numeric
    ignore: tuple[str, ...] = ()   # CSV: columns left out
    skip_bad: bool = False

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ConfigError(f"{opt('format')} must be one of {', '.join(FORMATS)}, not "
                              f"{self.format!r}")
        if not 1 <= self.bits <= 30:
            raise ConfigError(f"{opt('bits')} must be in 1..30, not {self.bits}")
        for q in self.quadratic:
            if len(q.encode()) != 2:
                raise ConfigError(f"{opt('quadratic')} takes two namespace characters (like "
                                  f"'ab'), not {q!r}")
        if self.quadratic and self.format != "vw":
            raise ConfigError(f"{opt('quadratic')} needs namespaces: it works with "
                              f"{opt('format')} vw only")

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

    def to_dict(self) -> dict[str, object]:
        return {"format": self.format, "bits": self.bits, "quadratic": list(self.quadratic),
                "constant": self.constant, "label": self.label,
                "categorical": list(self.categorical), "ignore": list(self.ignore)}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> ParseOptions:
        return cls(format=str(d["format"]), bits=int(d["bits"]),  # type: ignore[call-overload]
                   quadratic=tuple(d["quadratic"]), constant=bool(d["constant"]),  # type: ignore[arg-type]
                   label=str(d["label"]), categorical=tuple(d["categorical"]),  # type: ignore[arg-type]
                   ignore=tuple(d["ignore"]))  # type: ignore[arg-type]


@dataclass(kw_only=True)
class Dataset:
    """Hashed examples in CSR form. Labels are NaN where an example has none (test data)."""

    indptr: np.ndarray     # int64, n + 1
    indices: np.ndarray    # uint32, masked to bits
    values: np.ndarray     # float32
    labels: np.ndarray     # float32, n
    weights: np.ndarray    # float32, n (importance weights)
    bits: int
    tag_ptr: np.ndarray | None = None   # int64, n + 1 into tag_blob (VW tags)
    tag_blob: np.ndarray | None = None  # uint8
    skipped: int = 0                    # bad lines skipped with skip_bad
    sources: list[str] = field(default_factory=list)
    parse: ParseOptions | None = None   # how the text was parsed (None: built by hand)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def n_features(self) -> int:
        """Stored (non-zero) features, the constant and crosses included."""
        return int(self.indptr[-1])

    def tag(self, i: int) -> str:
        if self.tag_ptr is None or self.tag_blob is None:
            return ""
        return bytes(self.tag_blob[self.tag_ptr[i]:self.tag_ptr[i + 1]]).decode(errors="replace")

    @staticmethod
    def concat(parts: list[Dataset]) -> Dataset:
        """One dataset from several (the files of one shard), in order."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            raise ConfigError("no data: the shard has no files")
        bits = parts[0].bits
        offs = np.cumsum([0] + [p.n_features for p in parts])
        indptr = np.concatenate([parts[0].indptr[:1]] + [p.indptr[1:] + o
                                                          for p, o in zip(parts, offs[:-1])])
        # Tags come as a pair (offsets into a blob); kept only when every part has them.
        tags = [(p.tag_ptr, p.tag_blob) for p in parts
                if p.tag_ptr is not None and p.tag_blob is not None]
        tag_ptr: np.ndarray | None = None
        tag_blob: np.ndarray | None = None
        if len(tags) == len(parts):
            toffs = np.cumsum([0] + [len(blob) for _, blob in tags])
            tag_ptr = np.concatenate([np.zeros(1, np.int64)]
                                     + [ptr[1:] + o for (ptr, _), o in zip(tags, toffs[:-1])])
            tag_blob = np.concatenate([blob for _, blob in tags])
        return Dataset(indptr=indptr.astype(np.int64),
                       indices=np.concatenate([p.indices for p in parts]),
                       values=np.concatenate([p.values for p in parts]),
                       labels=np.concatenate([p.labels for p in parts]),
                       weights=np.concatenate([p.weights for p in parts]),
                       bits=bits, tag_ptr=tag_ptr, tag_blob=tag_blob,
                       skipped=sum(p.skipped for p in parts),
                       sources=[s for p in parts for s in p.sources], parse=parts[0].parse)
