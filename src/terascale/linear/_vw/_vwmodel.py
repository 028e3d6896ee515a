"""Vowpal Wabbit's binary model format, read and written natively (no VW library needed).

The layout is VW's ``save_load_header`` (``parse_regressor.cc``) followed by ``gd``'s
``save_load`` (``reductions/gd.cc``), all little-endian:

* the version string and the model id, each as uint32 length + bytes with a NUL;
* ``'m'``, min label and max label (float32: the range squared-loss predictions are
  clipped to), ``-b`` (uint32), lda (uint32), the ngram and skip definitions (uint32
  count + 3 bytes each), the "keep" options as a string (``--quadratic ab --noconstant
  ...``: VW re-applies them when it loads the model);
* a checksum: murmurhash3 (VW's ``uniform_hash``) chained over each write since the id
  (written as uint32 4, then the hash);
* ``gd``: one byte, ``save_resume``; with it the learner's state (initial_t, the
  normalized update's sums, the example counters, L1/L2 state), then per nonzero weight
  its index (uint32 below ``-b 31``, else uint64) and w, or with the state w and the sums
  of the update rules on: adaptive sum and normalizer for VW's default, one of them for
  ``--adaptive`` or ``--normalized`` without the other, none for ``--sgd`` or
  ``--invariant`` alone (the rules given are in the options then).

``write_vw_model`` writes the ``--predict_only_model`` form (weights only) or, for a model
saved after online passes, VW's default save_resume form, from which ``vw -i`` continues
training; ``read_vw_model`` reads either into a LinearModel (the state too, so that a warm
start continues as VW would). Models of reductions other than a plain linear learner
(their options in the header) are refused by name.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from typing import Any

from ..._errors import DataError
from ..._files import WRITE_PIECE, PieceWriter
from ..._lazy import lazy_module
from .._f32 import FLT_MAX as _FLT_MAX
from .._io._hashnames import murmur3_32
from .._losstable import VW_DEFAULT_LOSS, loss_spec
from .._online._state import (
    CONTRACTION,
    GRAVITY,
    MAX_LABEL,
    MIN_LABEL,
    SUM_NORM_X,
    TOTAL_WEIGHT,
    new_state,
)

np = lazy_module("numpy", globals(), "np")

__all__ = ["is_vw_model", "load_model", "read_vw_model", "run_counters", "run_generation",
           "save_model", "table_records", "write_vw_model"]

VERSION = "9.0.0"  # the oldest VW 9 reads it; every field below is in its format


def _murmur(data: bytes, seed: int) -> int:
    """VW's ``uniform_hash``: MurmurHash3 x86 32-bit."""
    return murmur3_32(data, seed)


def is_vw_model(path: str) -> bool:
    """Whether ``path`` starts as a VW model does (its version string)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    n = int.from_bytes(head[:4], "little") if len(head) >= 4 else 0
    return 0 < n <= 12 and head[4:4 + n - 1].replace(b".", b"").isdigit()


def load_model(path: str, generation: dict[str, list[str]] | None = None) -> Any:
    """A terascale model, or a VW binary model read as one (``generation``: the run's VW
    feature generation, :func:`run_generation`, which a VW model's must equal)."""
    from .._model import LinearModel

    return read_vw_model(path, generation=generation) if is_vw_model(path) else \
        LinearModel.load(path)


def save_model(model: Any, path: str, fmt: str = "terascale", *,
               predict_only: bool = False) -> None:
    """Save in terascale's format or VW's (``fmt`` "vw"; ``predict_only``: weights only)."""
    if fmt == "vw":
        write_vw_model(model, path, predict_only=predict_only)
    else:
        model.save(path)


def _options(parse: Any, oaa: int = 0, names: list[str] | None = None,
             link: str | None = None, rates: dict[str, float] | None = None,
             binary: bool = False, generation: dict[str, list[str]] | None = None,
             learner: str | None = None, indexing: int | None = None,
             rules: Iterable[str] = ()) -> str:
    """VW's serialized keep options (sorted by name; ignore/keep merged at the end);
    ``generation``: the run's ``--hash_seed``/``--hash``/``--redefine``/``--affix`` and
    ``--random_seed`` (:func:`run_generation`);
    ``learner``: VW's batch learner the model comes from (``bfgs`` or
    ``conjugate_gradient``, which VW's ``-i`` runs again);
    ``link``: the model's ``--link`` (VW applies it to the predictions of ``-i``, and
    keeps ``identity`` where it was given);
    ``binary``: the model's ``--binary`` (kept and applied to ``-i``'s predictions alike);
    ``rates``: ``learning_rate``/``power_t`` given to the run (VW keeps them in a
    save_resume model, as its float printed to 15 digits); ``indexing``: ``--oaa``'s
    ``--indexing`` given; ``rules``: the update rules given (``sgd``, ``adaptive``,
    ``normalized``, ``invariant``: VW keeps them in a save_resume model, whose records
    carry the sums of those rules)."""
    opts: list[tuple[str, str]] = [("oaa", str(oaa))] if oaa else []
    if link:
        opts.append(("link", link))
    if binary:
        opts.append(("binary", ""))
    if learner:
        opts.append((learner, ""))
    opts += [(r, "") for r in rules]
    opts += [(k, f"{float(np.float32(v)):.15g}") for k, v in (rates or {}).items()]
    if names:
        opts.append(("named_labels", ",".join(names)))
    if indexing is not None:
        opts.append(("indexing", str(indexing)))
    opts += [("cubic", v) for v in parse.cubic]
    opts += [("interactions", v) for v in parse.interactions]
    if not parse.constant:
        opts.append(("noconstant", ""))
    opts += [("quadratic", v) for v in parse.quadratic]
    gen = generation or {}
    if gen.get("hash_seed"):
        opts.append(("hash_seed", str(gen["hash_seed"][0])))
    if gen.get("hash"):
        opts.append(("hash", gen["hash"][0]))
    opts += [("redefine", v) for v in gen.get("redefine", [])]
    opts += [("affix", v) for v in gen.get("affix", [])[:1]]
    opts += [("spelling", v) for v in gen.get("spelling", [])]
    # (by name; a name's values in the order given, as VW's)
    text = "".join(f" --{k}" + (f" {v}" if v else "")
                   for k, v in sorted(opts, key=lambda o: o[0]))
    for name, values in (("ignore", parse.ignore), ("ignore_linear", parse.ignore_linear),
                         ("keep", parse.keep)):
        letters = sorted({c for v in values for c in v})
        if letters:
            text += f" --{name} " + "".join(letters)
    if gen.get("random_seed"):  # (VW writes it last)
        text += f" --random_seed {gen['random_seed'][0]}"
    return text


def run_counters(totals: list[list[float]], progress: list[float] | None,
                 kept: dict[str, float] | None = None) -> dict[str, Any]:
    """VW's performance counters (``shared_data``) from a run's per-pass sums (see
    ``_vwreport``; a row's eleventh and twelfth, where it has them, are VW's running
    sum_loss and labelled weight at the end of its pass, -i's ``kept`` in them, its
    thirteenth and fourteenth VW's running unlabelled weight and ``t``; its model
    and ``--readable_model`` keep them) and where its progress
    table stopped (``progress``: the next line's weight, the loss since the last line
    (VW's own sum) and the labelled weight at it; None: no line printed); ``kept``: -i's
    counters the run went on from (``--preserve_performance_counters``), added in."""
    from ._vwreport import RUN_LABELLED, RUN_LOSS, RUN_T, RUN_UNLABELLED, run_label_sum

    kept = kept if kept and "examples" in kept else {}
    loss = float(sum(t[0] for t in totals)) + kept.get("sum_loss", 0.0)
    labelled = float(sum(t[1] for t in totals)) + kept.get("weighted_labeled_examples", 0.0)
    if totals and len(totals[-1]) > RUN_LABELLED:  # (VW's running sums at the end, kept's on)
        loss, labelled = float(totals[-1][RUN_LOSS]), float(totals[-1][RUN_LABELLED])
    t = float(sum(t[1] + t[3] + t[6] for t in totals))
    unlabelled = float(sum(t[6] for t in totals)) + kept.get("weighted_unlabeled_examples",
                                                              0.0)
    labels = run_label_sum(totals) + kept.get("weighted_labels", 0.0)
    if totals and len(totals[-1]) > RUN_T:  # (VW's running sums, kept's in them)
        unlabelled, t = float(totals[-1][RUN_UNLABELLED]), float(totals[-1][RUN_T])
        labels = run_label_sum(totals)
    due, since, at_weight = progress if progress else (1.0, loss, 0.0)
    return {"t": t, "sum_loss": loss,
            "since": since, "dump": due, "labelled": labelled,
            "labels": labels, "unlabelled": unlabelled,
            "examples": int(sum(t[7] for t in totals)) + int(kept.get("examples", 0)),
            "features": int(sum(t[8] for t in totals)) + int(kept.get("features", 0)),
            "old": at_weight, "passes": len(totals) + int(kept.get("passes", 0))}


def counters_out(saved: dict[str, float]) -> dict[str, Any] | None:
    """A save_resume model's counters as :func:`read_vw_model` reads them
    (``info["vw_counters"]``) in :func:`run_counters`' form (``info["vw_counters_out"]``,
    which the model and its ``--readable_model`` are written with); None without them."""
    if "examples" not in saved:
        return None
    return {"t": float(saved["t"]), "sum_loss": float(saved["sum_loss"]),
            "since": float(saved["since"]), "dump": float(saved["dump"]),
            "labelled": float(saved["weighted_labeled_examples"]),
            "labels": float(saved["weighted_labels"]),
            "unlabelled": float(saved["weighted_unlabeled_examples"]),
            "examples": int(saved["examples"]), "features": int(saved["features"]),
            "old": float(saved["old"]), "passes": int(saved["passes"])}


def write_vw_model(model: Any, path: str, *, predict_only: bool = False) -> None:
    """Write ``model`` (a LinearModel) as VW's binary model at ``path``: the header, then
    the weights a chunk at a time (no copy of the whole model in memory)."""
    _write_atomic(path, _vw_chunks(model, predict_only=predict_only))


def write_vw_oaa_model(models: list[Any], path: str, names: list[str] | None = None,
                       generation: dict[str, list[str]] | None = None,
                       indexing: int | None = None, link: str | None = None,
                       binary: bool = False) -> None:
    """Write the K learners of ``--oaa K`` as VW's one-against-all model (its
    ``--predict_only_model`` form): VW interleaves the learners' weights, class c's weight
    of feature index i at ``i * 2**s + c`` (s = ceil(log2 K)) in its 2**b weights, under
    the header option ``--oaa K`` (and ``--named_labels``, with ``names``; ``generation``:
    the run's, :func:`run_generation`; ``indexing``: ``--indexing`` given; ``link``: the
    ``--link`` the learners score through; ``binary``: the run's ``--binary``): each
    learner was trained with b - s bits."""
    import dataclasses
    from types import SimpleNamespace

    k = len(models)
    shift = max(0, (k - 1).bit_length())
    if all(m.indices is models[0].indices for m in models):
        # the learners over one sorted feature list: interleaved, VW's order already
        idx = ((models[0].indices.astype(np.uint64)[:, None] << np.uint64(shift))
               + np.arange(k, dtype=np.uint64)).ravel()
        w = np.stack([m.weights for m in models], axis=1).astype(np.float32).ravel()
    else:
        idx = np.concatenate([(m.indices.astype(np.uint64) << np.uint64(shift))
                              + np.uint64(c) for c, m in enumerate(models)])
        w = np.concatenate([m.weights for m in models]).astype(np.float32)
    first = models[0]
    # (the learners share VW's prediction range: the header's, from the first's state)
    parse = dataclasses.replace(first.parse, bits=first.parse.bits + shift)
    merged = SimpleNamespace(indices=idx, weights=w, parse=parse, loss=first.loss,
                             adaptive=first.adaptive and (None, None, first.adaptive[2]),
                             info={**first.info, "vw_generation": generation or {},
                                   "vw_indexing": indexing, "link": link,
                                   "binary": binary})
    _write_atomic(path, _vw_chunks(merged, predict_only=True, oaa=k, index_bits=shift,
                                   names=names))


def write_vw_oaa_resume(model: Any, path: str, k: int, names: list[str] | None = None,
                        bare: bool = False) -> None:
    """Write ``--oaa K``'s model in VW's save_resume form: ``model`` the K learners
    interleaved as VW keeps them (class c's weight, adaptive sum and normalizer of feature
    i at ``i * 2**s + c``, ``parse.bits`` VW's b), the first class's learner state (the
    one VW saves) and the run's counters in ``info`` (``vw_counters_out``: VW's
    ``shared_data`` as :func:`run_counters` gives them, written as they are);
    ``bare``: the nonzero weights without their sums after the counters (VW's model
    after a ``-t`` run)."""
    shift = max(0, (k - 1).bit_length())
    _write_atomic(path, _vw_chunks(model, predict_only=False, oaa=k, index_bits=shift,
                                   names=names, bare=bare))


def _vw_bytes(model: Any, *, predict_only: bool, weights: bool = True, oaa: int = 0,
              index_bits: int = 0, names: list[str] | None = None) -> bytes:
    """VW's model file (``weights=False``: its header only, up to the checksum); ``oaa``
    K: a one-against-all model whose indices carry ``index_bits`` more bits."""
    return b"".join([bytes(p) for p in _vw_chunks(
        model, predict_only=predict_only, weights=weights, oaa=oaa, index_bits=index_bits,
        names=names)])  # (each piece copied before the next is formatted into its buffer)


# weights formatted a piece at a time into one buffer of this many features (256 KiB in
# a save_resume model's 16-byte records), which is written before the next is formatted
_CHUNK = 1 << 14
# the most bytes one write() hands the kernel (see terascale._files.WRITE_PIECE)
_WRITE = WRITE_PIECE


def _vw_chunks(model: Any, *, predict_only: bool, weights: bool = True, oaa: int = 0,
               index_bits: int = 0, names: list[str] | None = None,
               bare: bool = False) -> Iterator[Any]:
    """:func:`_vw_bytes` in pieces: the header, then the weights in index order, at most
    ``_CHUNK`` features a piece, each formatted into the same buffer: a piece is valid
    until the next is asked for (write or copy it first). Writing a model takes no memory
    beyond the buffer (a model of 20M features at ``-b 26`` took 7.5 s and 480 MB over the
    model itself to write as one ``bytes``); ``bare``: a save_resume header and counters,
    then the nonzero weights alone."""
    parse = model.parse
    if parse.format != "vw":
        raise DataError(f"a model trained on {parse.format} input cannot be a VW model (VW "
                        f"hashes VW-format features only)")
    state = model.adaptive[2] if model.adaptive is not None else None
    clip = loss_spec(model.loss).clip  # VW's range is the online pass's clip
    labels = state if state is not None and len(state) > MAX_LABEL else None
    if labels is not None and model.info.get("fixed_range"):
        clip = "labels"  # (--min_prediction/--max_prediction: VW writes them, any loss)
    if clip == "fixed":
        lo, hi = -50.0, 50.0
    elif clip == "labels50":  # [-50, 50], widened to the labels
        lo, hi = -50.0, 50.0
        if labels is not None:
            lo, hi = min(lo, float(labels[MIN_LABEL])), max(hi, float(labels[MAX_LABEL]))
    elif labels is not None:  # (lo > hi under --min_prediction: VW writes them so)
        lo, hi = float(labels[MIN_LABEL]), float(labels[MAX_LABEL])
    else:
        lo, hi = -_FLT_MAX, _FLT_MAX  # a batch model: terascale does not clip either
    out: list[bytes] = []
    h = [0]

    def put(b: bytes, hashed: bool = True) -> None:
        out.append(b)
        if hashed:
            h[0] = _murmur(b, h[0])

    u4 = struct.Struct("<I").pack
    v = VERSION.encode() + b"\0"
    put(u4(len(v)), False)
    put(v, False)
    put(u4(1))
    put(b"\0")
    put(b"m")
    put(struct.pack("<f", lo))
    put(struct.pack("<f", hi))
    put(u4(parse.bits))
    put(u4(0))  # lda
    info = getattr(model, "info", {})
    gen = info.get("vw_generation") or {}
    for key in ("ngram", "skips"):  # VW's --ngram/--skips values, 3 bytes each
        vals = gen.get(key, [])
        put(u4(len(vals)))
        for v in vals:
            put(v.encode()[:3].ljust(3, b"\0"))
    rules = info.get("vw_rules") or []
    o = _options(parse, oaa, names, info.get("link"),
                 None if predict_only else info.get("vw_rates"),
                 bool(info.get("binary")), gen, info.get("vw_learner"),
                 info.get("vw_indexing"), () if predict_only else rules).encode() + b"\0"
    put(u4(len(o)))
    put(o)
    put(u4(4) + u4(h[0]), False)  # length-prefixed, as VW writes it
    if not weights:
        yield b"".join(out)
        return
    resume = not predict_only and model.adaptive is not None
    put(b"\1" if resume else b"\0", False)
    table = getattr(model, "table", None)  # (the compiled run's dense rows: no indices)
    idx = model.indices if table is None else ()
    order = None  # (a model's indices are most often sorted already)
    if len(idx) > 1 and not bool(np.all(idx[1:] > idx[:-1])):
        order = np.argsort(idx, kind="stable")
    if resume:
        st = state  # (read a field at a time)
        # VW's performance counters from the run's per-pass sums (what
        # --preserve_performance_counters carries on): t, sum_loss, the labelled weight,
        # the examples learned from, the passes (up to the pass whose model the holdout kept)
        totals = model.info.get("pass_totals", [])
        totals = totals[:model.info.get("online_passes", len(totals))]
        loss = float(sum(t[0] for t in totals))
        weight = float(sum(t[1] for t in totals))
        # (t: the weight of every example not held out, labelled or not, and -i's t)
        seen = float(sum(t[1] + t[3] + (t[6] if len(t) > 6 else 0.0) for t in totals)
                     ) + model.info.get("vw_t0", 0.0)
        examples = int(sum(t[4] for t in totals))
        t0 = model.info.get("vw_initial_t", 0.0)  # (VW's initial_t)
        fmt = "<fdddd f ff ddd QQ d d Q dd".replace(" ", "")
        c = info.get("vw_counters_out")  # (VW's own, where the run kept them all)
        if c is not None:
            counters = struct.pack(fmt, t0, st[SUM_NORM_X], c["t"], c["sum_loss"],
                                   c["since"], c["dump"], lo, hi, c["labelled"],
                                   c["labels"], c["unlabelled"], c["examples"],
                                   c["features"], st[TOTAL_WEIGHT], c["old"],
                                   info.get("vw_current_pass", c.get("passes", len(totals))),
                                   st[GRAVITY], st[CONTRACTION])
        else:
            since, dump, labels, unlabelled, features, old = loss, 1.0, 0.0, 0.0, 0, weight
            passes = len(totals)
            if totals and all(len(t) >= 10 for t in totals):  # the run's full counters
                c = run_counters(totals, model.info.get("vw_progress"),
                                 model.info.get("vw_preserved"))
                since, dump, labels, unlabelled = c["since"], c["dump"], c["labels"], \
                    c["unlabelled"]
                examples, features, old = c["examples"], c["features"], c["old"]
                loss, weight, passes = c["sum_loss"], c["labelled"], c["passes"]
                seen = c["t"] + model.info.get("vw_t0", 0.0)
            counters = struct.pack(fmt, t0, st[SUM_NORM_X], seen, loss, since, dump, lo, hi,
                                   weight, labels, unlabelled, examples, features,
                                   st[TOTAL_WEIGHT], old, passes, st[GRAVITY],
                                   st[CONTRACTION])
        put(counters, False)
    yield b"".join(out)
    sums = (False, False)
    if resume and not bare:  # the sums of the rules on (VW's default: both)
        sums = record_sums(rules)
    if table is not None:
        yield from table_records(table, 1 | 2 * sums[0] | 4 * sums[1])
        return
    cols = [model.weights]
    cols += [model.adaptive[0]] if sums[0] else []
    cols += [model.adaptive[1]] if sums[1] else []
    itype = "<u4" if parse.bits < 31 else "<u8"  # (VW: by -b alone, --oaa K or not)
    dtype = np.dtype([("i", itype), ("w", "<f4", (len(cols),))])
    buf = np.empty(min(_CHUNK, len(idx)), dtype)
    for a in range(0, len(idx), _CHUNK):
        part = slice(a, a + _CHUNK) if order is None else order[a:a + _CHUNK]
        ip, vals = idx[part], [c[part] for c in cols]
        keep = vals[0] != 0  # (VW writes a record where any of its values is not 0)
        for v in vals[1:]:
            keep |= v != 0
        if not keep.all():
            ip, vals = ip[keep], [v[keep] for v in vals]
        rows = buf[:len(ip)]
        rows["i"] = ip
        for j, v in enumerate(vals):
            rows["w"][:, j] = v
        yield rows.view(np.uint8)


def table_records(table: Any, mask: int) -> Iterator[memoryview]:
    """VW's weight records of a dense table (rows of weight, adaptive sum, normalizer, in
    float32: the compiled learner's), ``_CHUNK`` at a time in one buffer (each valid until
    the next is asked for): the rows where a column of ``mask`` (bit j: column j) is not
    0, their index (uint32: the compiled learner's ``-b`` is at most 24) and those
    columns, as :func:`_vw_chunks` writes a model's (the compiled core's ``records``)."""
    from ..._cext import load
    from . import VWFAST

    fast = load(*VWFAST)
    size = 4 + 4 * bin(mask).count("1")
    buf = bytearray(size * _CHUNK)
    start, rows = 0, memoryview(table).nbytes // 12
    while start < rows:
        count, start = fast.records(table, start, mask, buf)
        if count:
            yield memoryview(buf)[:count * size]


def _write_atomic(path: str, data: bytes | Iterable[Any]) -> None:
    """A temporary file next to ``path``, written, flushed to the disk and renamed into
    place, the rename flushed too (a reader never sees half, and after a power loss the
    name points at the whole new file or the old one: ``terascale._files``), with the mode
    ``open()`` would give it; ``data`` is the file's bytes, or its pieces in order (bytes
    or buffers, each written before the next is asked for), handed to the kernel at most
    ``_WRITE`` bytes a call."""
    from ..._files import make_public, replace_durably

    replace_durably(path, lambda f: (make_public(f.fileno()), _write_pieces(f, data)),
                    prefix=".terascale-", what="model: ")


def _write_pieces(f: Any, data: bytes | Iterable[Any]) -> None:
    """``data`` (bytes, or pieces of bytes or buffers) written to the file ``f`` at most
    ``_WRITE`` bytes a ``write``."""
    out = PieceWriter(f, _WRITE)
    for piece in [data] if isinstance(data, bytes) else data:
        out.write(piece)


def _header_reader(path: str) -> _Reader:
    """A reader of the VW model at ``path`` for its header: the file mapped, so that only
    the pages read are (the helpers that look at a model's header run several times at a
    run's start; each read the whole file, hundreds of MB for a -b 26 model)."""
    import mmap

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data: Any = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    return _Reader(data, path)


class _Reader:
    def __init__(self, data: bytes, path: str) -> None:
        self.data, self.pos, self.path, self.h = data, 0, path, 0

    def take(self, n: int, hashed: bool = True) -> bytes:
        if self.pos + n > len(self.data):
            raise DataError(f"{self.path}: a truncated Vowpal Wabbit model (ends at byte "
                            f"{len(self.data)})")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        if hashed:
            self.h = _murmur(b, self.h)
        return b

    def u4(self, hashed: bool = True) -> int:
        return int(struct.unpack("<I", self.take(4, hashed))[0])

    def string(self, hashed: bool = True) -> str:
        n = self.u4(hashed)
        return self.take(n, hashed).split(b"\0", 1)[0].decode("utf-8", "replace")


_PLAIN = {"quadratic", "cubic", "interactions", "noconstant", "ignore", "ignore_linear",
          "keep", "link", "binary", "random_seed", "id", "bit_precision", "hash_seed",
          "l1_state", "l2_state",  # (VW 8's place for the learner's state)
          "learning_rate", "power_t"}  # (VW keeps them given: -i's run goes on with them)


def run_generation(args: Any) -> dict[str, list[str]]:
    """The run's VW feature generation: its ``--ngram``, ``--skips``, ``--hash_seed`` and
    ``--hash all`` (``terascale vw`` keeps them in ``args.vw_generation`` once it has
    applied them to the input; empty for other commands). A model's ``info`` carries them
    to -f (``info["vw_generation"]``: its header records them, as VW's does), and -i
    accepts a VW model that has the same ones; nothing of one run is left for the next."""
    return dict(getattr(args, "vw_generation", None) or {})


def model_generation(path: str) -> tuple[list[str], list[str], int, str, int | None]:
    """The --ngram, --skips, --hash_seed and --hash values a VW model file records, and its
    -b (empty, empty, 0, "strings", None for terascale's)."""
    if not is_vw_model(path):
        return [], [], 0, "strings", None
    r = _header_reader(path)
    r.string(False)
    r.string()
    if r.take(1) != b"m":
        return [], [], 0, "strings", None
    r.take(8)
    bits = r.u4()
    r.u4()
    grams = [r.take(3).rstrip(b"\0").decode() for _ in range(r.u4())]
    skips = [r.take(3).rstrip(b"\0").decode() for _ in range(r.u4())]
    tokens = r.string().split()
    seed, hashing = 0, "strings"
    for a, b in zip(tokens, tokens[1:]):
        if a == "--hash_seed" and b.isdigit():
            seed = int(b)
        if a == "--hash" and b == "all":
            hashing = b
    return grams, skips, seed, hashing, bits


def read_regularizer(path: str, bits: int) -> tuple[np.ndarray, float, float]:
    """VW's ``--output_feature_regularizer_binary`` file (as ``--input_feature_regularizer``
    reads it): 2 * 2^bits floats, per weight its L2 strength and the weight it pulls
    toward; and the prediction range its header records (VW's run starts from it)."""
    with open(path, "rb") as f:
        r = _Reader(f.read(), path)
    r.string(False)
    r.string()
    if r.take(1) != b"m":
        raise DataError(f"{path}: not a Vowpal Wabbit regularizer file")
    lo, hi = struct.unpack("<ff", r.take(8))
    have = r.u4()
    if have != bits:
        raise DataError(f"{path}: a regularizer of -b {have}, this run has -b {bits}")
    r.u4()
    for _ in range(r.u4()):
        r.take(3)
    for _ in range(r.u4()):
        r.take(3)
    r.string()
    r.take(8, False)
    if r.take(1, False) == b"\0":
        raise DataError(f"{path}: a model, not a regularizer file (VW's "
                        f"--output_feature_regularizer_binary writes those)")
    rest = r.data[r.pos:]
    dt = np.dtype([("i", "<u4"), ("v", "<f4")])
    if len(rest) % dt.itemsize:
        raise DataError(f"{path}: the regularizer's records are cut short")
    rows = np.frombuffer(rest, dt)
    out = np.zeros(2 << bits, np.float32)
    if len(rows) and int(rows["i"].max()) >= len(out):
        raise DataError(f"{path}: regularizer index {int(rows['i'].max())} beyond -b {bits}")
    out[rows["i"]] = rows["v"]
    return out, lo, hi


def write_regularizer(model: Any, reg: np.ndarray, path: str, *, text: bool) -> None:
    """VW's ``--output_feature_regularizer_binary``/``_text``: the model's header, then
    ``index:value`` (text) or (u32, f32) records for the non-zero entries of ``reg``."""
    head = _vw_bytes(model, predict_only=True, weights=False)
    nz = np.flatnonzero(reg)
    if text:
        lines = "".join(f"{i}:{float(reg[i]):g}\n" for i in nz.tolist())
        data = (f"Version {VERSION}\nId \nMin label:{-_FLT_MAX:g}\nMax label:{_FLT_MAX:g}\n"
                f"bits:{model.parse.bits}\n:1\n{lines}").encode()
    else:
        rows = np.zeros(len(nz), dtype=[("i", "<u4"), ("v", "<f4")])
        rows["i"], rows["v"] = nz, reg[nz]
        data = head + b"\1" + rows.tobytes()
    _write_atomic(path, data)


# the learners a VW model's header names (VW re-applies them when it loads the model;
# ``terascale vw`` does too, see ``model_rules``), by option -> terascale vw's flag
_RULES = {"bfgs": "bfgs", "conjugate_gradient": "cg", "sgd": "sgd", "adaptive": "adaptive",
          "normalized": "normalized", "invariant": "invariant"}


def record_sums(rules: Iterable[str]) -> tuple[bool, bool]:
    """Whether a save_resume record of a model of the update ``rules`` its header names
    (``sgd``, ``adaptive``, ``normalized``, ``invariant``; none: VW's default, all three)
    carries the adaptive sum, and the normalizer, after the weight (VW's ``gd``)."""
    rules = [r for r in rules if r in ("sgd", "adaptive", "normalized", "invariant")]
    if not rules:
        return True, True
    return "adaptive" in rules, "normalized" in rules


def _past_options(path: str) -> tuple[Any, str] | None:
    """A reader of the VW model at ``path`` past its header's options line, and that
    line; None for terascale's models and VW's models without one."""
    if not is_vw_model(path):
        return None
    r = _header_reader(path)
    r.string(False)
    r.string()
    if r.take(1) != b"m":
        return None
    r.take(16)
    for _ in range(2):
        r.take(3 * r.u4())
    return r, r.string()


def _rules_of(tokens: list[str]) -> list[str]:
    """The learner options among a model header's option tokens, as argument names."""
    return [_RULES[t[2:]] for t in tokens if t[2:] in _RULES]


def model_rules(path: str) -> list[str]:
    """The learner options a VW model's header records (``--bfgs``, ``--sgd``,
    ``--adaptive``...), as ``terascale vw``'s argument names (empty for terascale's
    models): VW applies them to a run that loads the model."""
    return _rules_of(model_options(path))


def model_sums(path: str) -> tuple[bool, bool] | None:
    """Whether the records of a VW save_resume model of gd carry the adaptive sum and the
    normalizer (:func:`record_sums` of the rules its header names); None for any other
    model (weights alone, a batch learner's, terascale's)."""
    head = _past_options(path)
    if head is None:
        return None
    r, options = head
    rules = _rules_of(options.split())
    if "bfgs" in rules or "cg" in rules:
        return None
    r.take(8, False)  # the checksum
    return record_sums(rules) if r.take(1, False) != b"\0" else None


def model_t(path: str) -> float:
    """The examples' weight a VW save_resume model has seen (VW's ``t``, which its
    preamble prints as ``initial_t`` when it loads the model); 0 for other models."""
    head = _past_options(path)
    if head is None:
        return 0.0
    r = head[0]
    r.take(8, False)  # the checksum
    if r.take(1, False) == b"\0":
        return 0.0
    return float(struct.unpack("<fdd", r.take(20, False))[2])


def model_options(path: str) -> list[str]:
    """The options line of a VW model's header, split at whitespace as VW splits it (``--quadratic
    ui --ignore e ...``); empty for terascale's models."""
    head = _past_options(path)
    return [] if head is None else head[1].split()


def model_interactions(path: str) -> bool:
    """Whether the model at ``path`` has any ``-q``/``--cubic``/``--interactions`` (a VW
    model's header, read alone; a terascale model's parse options)."""
    if not is_vw_model(path):
        from .._model import LinearModel

        p = LinearModel.load(path).parse
        return bool(p.quadratic or p.cubic or p.interactions)
    return any(t in ("--quadratic", "--cubic", "--interactions") for t in model_options(path))


def model_oaa(path: str) -> tuple[int | None, list[str] | None]:
    """(K, names) when ``path`` is VW's one-against-all model (its header's ``--oaa K``
    and ``--named_labels``), else (None, None) (terascale's models too)."""
    tokens = model_options(path)
    k, names = None, None
    for a, b in zip(tokens, tokens[1:]):
        if a == "--oaa" and b.isdigit():
            k = int(b)
        elif a == "--named_labels":
            names = b.split(",")
    return k, names


def read_vw_model(path: str, *, oaa: bool = False,
                  generation: dict[str, list[str]] | None = None, plain: bool = False,
                  records: bool = True) -> Any:
    """A VW binary model (a plain linear learner's) as a LinearModel; ``oaa``: also VW's
    one-against-all model (``info["oaa"]`` = K; :func:`._oaa.split_oaa` gives its K
    learners); ``plain``: its fields in a namespace (no LinearModel, whose module imports
    numba: the compiled ``-t`` run reads them, :mod:`._vwonline`); ``records=False`` (with
    ``plain``): the header alone, the weight records left in the file for
    ``model.records`` (:class:`VWRecords`) to read a slice at a time (``indices`` and
    ``weights`` None, ``adaptive`` its state alone): a -b 26 model of 7M features held
    400 MB read whole and unpacked beside the 256 MB table it fills."""
    from .._io._dataset import ParseOptions

    if records:
        with open(path, "rb") as f:
            r = _Reader(f.read(), path)
    else:
        r = _header_reader(path)
    version = r.string(False)
    parts = tuple(int(x) for x in version.split(".")[:3] if x.isdigit())
    if parts < (8, 0, 3):
        raise DataError(f"{path}: a Vowpal Wabbit {version} model; terascale reads VW "
                        f"models from version 8.0.3 on (retrain, or convert it with a "
                        f"newer vw: vw -i old -f new --predict_only_model -t -d /dev/null)")
    r.string()  # id
    if r.take(1) != b"m":
        raise DataError(f"{path}: not a Vowpal Wabbit model file")
    lo = struct.unpack("<f", r.take(4))[0]
    hi = struct.unpack("<f", r.take(4))[0]
    bits = r.u4()
    if r.u4():
        raise DataError(f"{path}: an LDA model (VW's --lda), not a linear learner's")
    grams = [r.take(3).rstrip(b"\0").decode() for _ in range(r.u4())]
    skips = [r.take(3).rstrip(b"\0").decode() for _ in range(r.u4())]
    gen = generation or {}
    if (grams or skips) and (grams, skips) != (gen.get("ngram"), gen.get("skips")):
        raise DataError(f"{path}: trained with --ngram/--skips ({' '.join(grams)}; "
                        f"{' '.join(skips) or 'no skips'}): terascale vw -i generates them "
                        f"as VW does; other terascale commands do not")
    text = r.string()
    want = r.h
    if r.u4(False) != 4 or r.u4(False) != want:  # (VW writes it length-prefixed)
        raise DataError(f"{path}: the Vowpal Wabbit model's header checksum does not match "
                        f"(a damaged file)")
    opts: dict[str, list[str]] = {}
    tokens = text.split()
    i = 0
    while i < len(tokens):
        name = tokens[i].lstrip("-")
        val = tokens[i + 1] if i + 1 < len(tokens) and not tokens[i + 1].startswith("--") \
            else ""
        i += 2 if val else 1
        seeded = (name == "hash_seed" and [val] == [str(v) for v in
                                                   gen.get("hash_seed", [])]) or \
            (name == "hash" and [val] in (["strings"], gen.get("hash"))) or \
            (name in ("redefine", "affix", "spelling") and val in gen.get(name, []))
        if name not in _PLAIN and name not in _RULES and not seeded and not (
                oaa and name in ("oaa", "named_labels", "indexing")):
            raise DataError(f"{path}: a Vowpal Wabbit model of --{name} (options: "
                            f"{text.strip()}); terascale reads plain linear models only")
        opts.setdefault(name, []).append(val)
    resume = r.take(1, False) != b"\0"
    state = new_state(min_label=lo, max_label=hi)
    counters: dict[str, float] = {}
    if resume:  # (VW 9 added the L1 and L2 state; VW 8 kept them as options)
        fmt = "<fdddd f ff ddd QQ d d Q" + ("dd" if parts >= (9, 0, 0) else "")
        vals = struct.unpack(fmt, r.take(struct.calcsize(fmt), False))
        l1_l2 = vals[16:18] if parts >= (9, 0, 0) else (
            float(opts.get("l1_state", ["0"])[0]), float(opts.get("l2_state", ["1"])[0]))
        state[SUM_NORM_X], state[TOTAL_WEIGHT] = vals[1], vals[13]
        state[GRAVITY], state[CONTRACTION] = l1_l2
        counters = {"sum_loss": vals[3], "weighted_labeled_examples": vals[8], "t": vals[2],
                    "initial_t": vals[0], "weighted_unlabeled_examples": vals[10],
                    # (the rest of VW's shared_data, which --preserve_performance_counters
                    # carries on: its progress table's state, its counts, its passes)
                    "since": vals[4], "dump": vals[5], "weighted_labels": vals[9],
                    "examples": vals[11], "features": vals[12], "old": vals[14],
                    "passes": vals[15]}
        state[MIN_LABEL], state[MAX_LABEL] = vals[6], vals[7]
    # per weight, save_resume keeps w and the sums of the rules on: VW's default keeps the
    # adaptive and normalized ones; a model of --sgd, or of some of the three, fewer
    rules = [n for n in opts if n in _RULES]
    batch = "bfgs" in rules or "conjugate_gradient" in rules  # (weights alone)
    has_g2, has_nrm = record_sums(rules) if resume and not batch else (False, False)
    width = 1 + has_g2 + has_nrm
    dt = np.dtype([("i", "<u4" if bits < 31 else "<u8"), ("w", "<f4", (width,))])
    size = len(r.data) - r.pos
    if size % dt.itemsize:
        raise DataError(f"{path}: the weights of the Vowpal Wabbit model do not fill whole "
                        f"records ({size} bytes of {dt.itemsize}); a model of another "
                        f"update rule (--sgd, --adaptive alone, --ftrl) is not supported")
    stored = VWRecords(path, r.pos, size // dt.itemsize, dt, bits,
                       (0, *([1] if has_g2 else []), *([2] if has_nrm else [])))
    if records:
        rows = np.frombuffer(r.data[r.pos:], dt)
        stored.check(rows["i"])
    parse = ParseOptions(bits=bits, quadratic=tuple(opts.get("quadratic", [])),
                         cubic=tuple(opts.get("cubic", [])),
                         interactions=tuple(opts.get("interactions", [])),
                         constant="noconstant" not in opts,
                         ignore=tuple(opts.get("ignore", [])), keep=tuple(opts.get("keep", [])),
                         ignore_linear=tuple(opts.get("ignore_linear", [])))
    # (the link a model records: logistic; anything else is VW's default loss)
    loss = "logistic" if "logistic" in opts.get("link", []) else VW_DEFAULT_LOSS
    if records:
        w = rows["w"].astype(np.float32)
        zeros = np.zeros(len(w), np.float32)
        adaptive: tuple = (w[:, 1] if has_g2 else zeros, w[:, 1 + has_g2] if has_nrm
                           else zeros, state)
        indices, weights = rows["i"].astype(np.uint32), w[:, 0]
    else:
        adaptive, indices, weights = (None, None, state), None, None
    if plain:
        from types import SimpleNamespace as LinearModel
    else:
        from .._model import LinearModel
    model = LinearModel(indices=indices, weights=weights, parse=parse,
                        loss=loss, info={"source": os.path.abspath(path),
                                         "vw_version": version, "vw_counters": counters,
                                         # (VW writes the initial_t it read back out)
                                         "vw_initial_t": counters.get("initial_t", 0.0),
                                         **({"link": opts["link"][0]} if "link" in opts
                                            else {}),
                                         **({"binary": True} if "binary" in opts else {}),
                                         "vw_rates": {k: float(opts[k][0]) for k in
                                                      ("learning_rate", "power_t")
                                                      if k in opts},
                                         **({"oaa": int(opts["oaa"][0])} if "oaa" in opts
                                            else {}),
                                         **({"indexing": int(opts["indexing"][0])}
                                            if "indexing" in opts else {}),
                                         **({"vw_rules": [r for r in rules
                                                          if r not in ("bfgs",
                                                                       "conjugate_gradient")]}
                                            if rules else {})},
                        adaptive=adaptive)
    if not records:
        model.records = stored
    return model


class HeldRecords:
    """A model's rows held in memory (its ``indices``, ``weights`` and adaptive sums, as
    ``read_vw_model`` reads them whole and the command line may have changed them), put
    into a table as :meth:`VWRecords.put` puts a file's."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def put(self, table: np.ndarray, unseen: np.ndarray | None = None) -> None:
        m = self.model
        idx = np.asarray(m.indices, np.int64)
        cols = (m.weights, m.adaptive[0], m.adaptive[1])
        if unseen is not None:
            off = (unseen[idx >> 3] >> (idx & 7)) & 1 == 0
            idx, cols = idx[off], tuple(np.asarray(c)[off] for c in cols)
        for col, values in enumerate(cols):
            table[idx, col] = values


class VWRecords:
    """The weight records of a VW model file (``count`` of numpy type ``dt`` from byte
    ``offset``: an index and w, then the sums a save_resume model keeps, the columns
    ``columns`` of a learner's rows: 0 the weight, 1 the adaptive sum, 2 the normalizer),
    read a slice at a time into one buffer: the memory of a slice, whatever the model's
    size."""

    def __init__(self, path: str, offset: int, count: int, dt: np.dtype, bits: int,
                 columns: tuple[int, ...] = (0,)) -> None:
        self.path, self.offset, self.count, self.dt, self.bits = path, offset, count, dt, bits
        self.columns = columns

    def __len__(self) -> int:
        return self.count

    def check(self, indices: np.ndarray) -> None:
        if len(indices) and int(indices.max()) >= 1 << self.bits:
            raise DataError(f"{self.path}: weight index {int(indices.max())} beyond "
                            f"-b {self.bits}")

    def slices(self, n: int = 1 << 16) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(indices, w) of up to ``n`` records at a time, in the file's order: views of
        a buffer the next slice overwrites (use each before asking for the next)."""
        for i, w in self.rows(n):
            yield i, w[:, 0]

    def put(self, table: np.ndarray, unseen: np.ndarray | None = None,
            n: int = 1 << 14) -> None:
        """Write the records into the rows of ``table`` (``2**bits`` rows of weight,
        adaptive sum and normalizer; a sum the model does not keep: 0), ``n`` at a time;
        ``unseen``: only the rows whose bit is clear in that bitmap (``np.packbits``'s,
        little-endian)."""
        for i, w in self.rows(n):
            if unseen is not None:
                idx = i.astype(np.int64)
                off = (unseen[idx >> 3] >> (idx & 7)) & 1 == 0
                i, w = i[off], w[off]
            for col in range(3):
                table[i, col] = w[:, self.columns.index(col)] if col in self.columns else 0

    def rows(self, n: int = 1 << 16) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(indices, values) of up to ``n`` records at a time (``values``: w and the sums
        kept, one row a record), as :meth:`slices`."""
        size = self.dt.itemsize
        buf = bytearray(min(n, max(self.count, 1)) * size)
        done = 0
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            while done < self.count:
                k = min(n, self.count - done)
                view = memoryview(buf)[:k * size]
                if f.readinto(view) != k * size:
                    raise DataError(f"{self.path}: a truncated Vowpal Wabbit model (its "
                                    f"weights end before record {done + k})")
                rows = np.frombuffer(buf, self.dt, count=k)
                self.check(rows["i"])
                yield rows["i"], rows["w"]
                done += k
