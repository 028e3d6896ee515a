"""The in-memory form of a data shard: hashed sparse rows (CSR) with labels and weights.

Every reader produces a :class:`Dataset`; the cache stores exactly these arrays; the
learners read only them. Indices are already masked to ``bits`` and include VW's constant
(bias) feature and any interactions (``-q``, ``--cubic``, ``--interactions``), in VW's
order, so a learner never hashes.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from ..._errors import ConfigError
from ..._lazy import lazy_module
from .._names import opt

np = lazy_module("numpy", globals(), "np")

__all__ = ["Dataset", "ParseOptions", "example_tag"]

FORMATS = ("vw", "libsvm", "csv")
# the fields that take several values (a string alone stands for one)
_SEQUENCES = ("quadratic", "cubic", "interactions", "categorical", "ignore", "keep",
              "ignore_linear")


def example_tag(tag_ptr: np.ndarray | None, tag_blob: np.ndarray | None, i: int) -> str:
    """The VW tag of example ``i`` of a Dataset or Block's ``tag_ptr``/``tag_blob`` (``""``
    when there are no tags)."""
    if tag_ptr is None or tag_blob is None:
        return ""
    return bytes(tag_blob[tag_ptr[i]:tag_ptr[i + 1]]).decode("utf-8", "surrogateescape")

@dataclass(frozen=True, kw_only=True)
class ParseOptions:
    """How text becomes hashed features; saved in the model so that predict parses alike.

    The fields that take several values (the interactions, ``categorical``, ``ignore``,
    ``keep``, ``ignore_linear``) accept any sequence of strings, or one string for one
    value (``quadratic="ab"`` is ``quadratic=("ab",)``); they are held as tuples.

    Parameters
    ----------
    format
        ``"vw"`` (VW text, the default), ``"libsvm"`` or ``"csv"``.
    bits
        Hash bits: the model has ``2**bits`` weights (default 18; 1 to 30).
    quadratic
        Namespace pairs to cross, by first letter (VW's ``-q``; ``":"`` is the wildcard).
    cubic
        Namespace triples to cross (VW's ``--cubic``).
    interactions
        Crosses of two or more namespaces (VW's ``--interactions``).
    constant
        Add VW's bias feature (default True; ``--noconstant`` turns it off).
    label
        CSV: the label column (default ``"label"``).
    categorical
        CSV: columns hashed as categories even when numeric.
    ignore
        VW: namespaces left out, by their first letters (``--ignore ab`` drops namespaces
        starting with a or b); CSV: columns left out.
    keep
        VW: only the namespaces starting with these letters.
    ignore_linear
        VW: namespaces used in interactions only.
    skip_bad
        Skip malformed lines, counting them, instead of raising DataError (default False).
    permutations
        VW's ``--permutations``: a namespace crossed with itself gives every ordered pair,
        not only ``j >= i`` (default False).
    leave_duplicates
        VW's ``--leave_duplicate_interactions``: ``-q ab -q ba`` crosses twice (default
        False).
    lenient_labels
        Read VW text's label sections as VW does where it warns and reads on (``terascale
        vw`` sets it; default False: such a line is an error naming its file and line): a
        label word that is no number or NaN is 0 (``abc |a f``; VW's ``[warning] 'abc' is
        not a good float, replacing with 0``), a label of more than three words leaves the
        example unlabelled (VW's ``[error] Error: 4 is too many tokens for a simple
        label: ...``); the lines are in :attr:`Dataset.notes`. Like ``skip_bad`` it is
        how the text is read, not what a model means: not in :meth:`to_dict`, in the
        cache's key.
    """

    format: str = "vw"
    bits: int = 18
    quadratic: tuple[str, ...] = ()
    cubic: tuple[str, ...] = ()
    interactions: tuple[str, ...] = ()
    constant: bool = True
    label: str = "label"
    categorical: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    ignore_linear: tuple[str, ...] = ()
    skip_bad: bool = False
    permutations: bool = False
    leave_duplicates: bool = False
    lenient_labels: bool = False

    def __post_init__(self) -> None:
        from ._interactions import compile_interactions

        # one interaction, namespace or column given as a string is a one-element tuple;
        # any sequence is held as a tuple (hashable, equal however it was given)
        for name in _SEQUENCES:
            v = getattr(self, name)
            if not isinstance(v, tuple):
                object.__setattr__(self, name, (v,) if isinstance(v, str) else tuple(v))
        if self.format not in FORMATS:
            raise ConfigError(f"{opt('format')} must be one of {', '.join(FORMATS)}, not "
                              f"{self.format!r}")
        if not 1 <= self.bits <= 30:
            raise ConfigError(f"{opt('bits')} must be in 1..30, not {self.bits}")
        compile_interactions(self.quadratic, self.cubic, self.interactions,
                             leave_duplicates=self.leave_duplicates)  # validates
        if self.format != "vw":
            for name in ("quadratic", "cubic", "interactions", "keep", "ignore_linear"):
                if getattr(self, name):
                    raise ConfigError(f"{opt(name)} needs namespaces: it works with "
                                      f"{opt('format')} vw only")
        if self.format == "libsvm" and self.ignore:
            raise ConfigError(f"{opt('ignore')} works with {opt('format')} vw (namespaces) "
                              f"or csv (columns)")
        for name in ("ignore", "keep", "ignore_linear"):
            if self.format == "vw" and any(not x for x in getattr(self, name)):
                raise ConfigError(f"{opt(name)} takes namespace letters (like 'a'), not ''")

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

    def interaction_table(self) -> np.ndarray:
        """The parser's table of interactions (VW's order, wildcards expanded)."""
        cells, width = self.interaction_cells()
        return np.array(cells, np.int32).reshape(-1, width)

    def interaction_cells(self) -> tuple[array, int]:
        """:meth:`interaction_table`'s cells, row after row, and its width (no numpy)."""
        from ._interactions import compile_interactions, interaction_cells

        return interaction_cells(compile_interactions(self.quadratic, self.cubic,
                                                      self.interactions,
                                                      leave_duplicates=self.leave_duplicates),
                                 self.permutations)

    def namespace_flags(self) -> tuple[np.ndarray, np.ndarray]:
        """(ignored, linear ignored): 256 flags by namespace letter, as VW's ``--ignore``,
        ``--keep`` (everything else ignored; it overrides ``--ignore``, as in VW) and
        ``--ignore_linear``."""
        ign, lin = self.namespace_bytes()
        return np.frombuffer(ign, np.bool_), np.frombuffer(lin, np.bool_)

    def namespace_bytes(self) -> tuple[bytearray, bytearray]:
        """:meth:`namespace_flags` as 256 bytes each (1: set), without numpy."""
        ign, lin = bytearray(256), bytearray(256)
        if self.format == "vw":
            for v in self.ignore:
                for c in v.encode("utf-8", "surrogateescape"):
                    ign[c] = 1
            if self.keep:
                ign[:] = b"\1" * 256
                for v in self.keep:
                    for c in v.encode("utf-8", "surrogateescape"):
                        ign[c] = 0
            for v in self.ignore_linear:
                for c in v.encode("utf-8", "surrogateescape"):
                    lin[c] = 1
        return ign, lin

    def to_dict(self) -> dict[str, object]:
        return {"format": self.format, "bits": self.bits, "quadratic": list(self.quadratic),
                "cubic": list(self.cubic), "interactions": list(self.interactions),
                "constant": self.constant, "label": self.label,
                "categorical": list(self.categorical), "ignore": list(self.ignore),
                "keep": list(self.keep), "ignore_linear": list(self.ignore_linear),
                "permutations": self.permutations, "leave_duplicates": self.leave_duplicates}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ParseOptions:
        # models written before cubic/interactions/keep/ignore_linear lack those keys
        """The options :meth:`to_dict` wrote (a saved model's), checked as the constructor checks them.

        Parameters
        ----------
        d
            The dict.
        """
        return cls(format=str(d["format"]), bits=int(d["bits"]),
                   quadratic=tuple(d["quadratic"]), cubic=tuple(d.get("cubic", ())),
                   interactions=tuple(d.get("interactions", ())),
                   constant=bool(d["constant"]), label=str(d["label"]),
                   categorical=tuple(d["categorical"]), ignore=tuple(d["ignore"]),
                   keep=tuple(d.get("keep", ())),
                   ignore_linear=tuple(d.get("ignore_linear", ())),
                   permutations=bool(d.get("permutations", False)),
                   leave_duplicates=bool(d.get("leave_duplicates", False)))


@dataclass(kw_only=True)
class Dataset:
    """Hashed examples in CSR form. Labels are NaN where an example has none (test data).

    Parameters
    ----------
    indptr
        Row pointers (int64, n + 1 entries, ``indptr[0] == 0``).
    indices
        Hashed feature indices (uint32, masked to ``bits``).
    values
        Feature values (float32).
    labels
        Labels (float32), NaN where an example has none.
    weights
        Importance weights (float32).
    bits
        Hash bits the indices are masked to.
    tag_ptr
        Offsets into ``tag_blob`` of each example's VW tag (int64, n + 1), or None: no tags.
    tag_blob
        The VW tags' bytes (uint8), or None.
    skipped
        Bad lines skipped with ``skip_bad`` (default 0).
    sources
        The files it was read from.
    parse
        How the text was parsed (default None: built by hand).
    blanks
        VW text's empty lines: for each, the index of the example it precedes (int64,
        sorted, ``n`` for one after the last example), or None: none. VW counts them as
        examples for the holdout (:func:`._passes.holdout_mask`).
    ignored
        Each example's count of features ``--ignore_linear`` dropped (int64, n), or None:
        none. VW counts them in its feature counts.
    notes
        With :attr:`ParseOptions.lenient_labels`, VW's lines on the label sections it read
        anyway (``[warning] 'abc' is not a good float, replacing with 0``), in order, or
        None: none. ``terascale vw`` prints them on standard output, where VW does.
    """

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
    blanks: np.ndarray | None = None    # int64: the example each empty line precedes
    ignored: np.ndarray | None = None   # int64, n: --ignore_linear's features (VW counts)
    notes: list[str] | None = None      # VW's lines on label sections (lenient_labels), in order

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def n_features(self) -> int:
        """Stored (non-zero) features, the constant and crosses included."""
        return int(self.indptr[-1])

    def tag(self, i: int) -> str:
        """The VW tag of example ``i`` (``""`` when it has none).

        Parameters
        ----------
        i
            The example's index.
        """
        return example_tag(self.tag_ptr, self.tag_blob, i)

    @staticmethod
    def concat(parts: list[Dataset]) -> Dataset:
        """One dataset from several (the files of one shard), in order.

        Parameters
        ----------
        parts
            The datasets, in order (the same ``bits``).
        """
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
        starts = np.cumsum([0] + [len(p) for p in parts])
        blanks = [p.blanks + o for p, o in zip(parts, starts[:-1]) if p.blanks is not None]
        ignored = (np.concatenate([p.ignored if p.ignored is not None
                                   else np.zeros(len(p), np.int64) for p in parts])
                   if any(p.ignored is not None for p in parts) else None)
        return Dataset(indptr=indptr.astype(np.int64),
                       indices=np.concatenate([p.indices for p in parts]),
                       values=np.concatenate([p.values for p in parts]),
                       labels=np.concatenate([p.labels for p in parts]),
                       weights=np.concatenate([p.weights for p in parts]),
                       bits=bits, tag_ptr=tag_ptr, tag_blob=tag_blob,
                       skipped=sum(p.skipped for p in parts),
                       sources=[s for p in parts for s in p.sources], parse=parts[0].parse,
                       blanks=np.concatenate(blanks).astype(np.int64) if blanks else None,
                       ignored=ignored,
                       notes=[t for p in parts for t in p.notes or []] or None)
