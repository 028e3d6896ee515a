"""Authenticated TCP links: AEAD records under the mesh's frames, always.

:class:`SecureLink` wraps one connected, authenticated socket and offers the non-blocking
socket calls the TCP mesh makes (``sendmsg``, ``recvmsg_into``, ``recv_into``, ``recv``
with ``MSG_PEEK``, ``send``), so the exchange runs unchanged over it. Every byte the mesh
sends, frame headers and payloads alike, travels inside records, in one of two modes:

``integrity`` (the default)
    ``length u32 | plaintext | tag``, the tag a MAC of the plaintext: AEGISMAC-128X4
    (draft-irtf-cfrg-aegis-aead, "AEGIS as a MAC": AEGIS-128X4 absorbing the plaintext,
    its 16-byte key the first half of the direction's HKDF key, its 16-byte nonce the
    record's 12-byte one zero-padded) where both ends have the compiled record layer and a
    CPU on which libaegis runs the AES round in hardware, else GMAC (AES-256-GCM with the
    plaintext as associated data and nothing to encrypt, NIST SP 800-38D), which every
    build runs. The two ends agree on the MAC as they do on a cipher (:func:`agree_cipher`:
    the dialling end's offer in its sealed hello, AEGISMAC-128X4 first where it runs it,
    the accepting end's choice in its own, the MAC in the keys' HKDF label; an end with
    ``TERASCALE_LINK_MAC=gmac`` offers GMAC alone). Nobody on the path can alter, replay,
    drop, duplicate, reorder or splice a record unnoticed; they can read it. The MAC runs
    at tens of GB/s per core (AEGISMAC-128X4 about twice as fast as the VPCLMULQDQ GHASH
    on a large hot buffer on VAES/AVX-512, and as fast on a 4 KiB record; AES-GCM
    encryption and keyed BLAKE2b run at a fraction of that), the plaintext is sent
    straight from the caller's buffer, and a record of 64 KiB or more that the caller's
    buffer holds whole is read straight into it and checked there (hashed piece by piece
    as the pieces land, where the compiled layer runs the MAC), its bytes handed over only
    once the tag passed and wiped if it fails; the header record before it is read with
    the next record's length and no further, so that the payload's records are still in
    the kernel for that (measured in ``docs/benchmarks/security.md``).
``encrypt`` (``--encrypt``)
    ``length u32 | AEAD(plaintext) | tag``: confidentiality as well. The AEAD is
    AEGIS-256X4 (draft-irtf-cfrg-aegis-aead; a CAESAR finalist built on the AES round,
    about twice AES-256-GCM's speed on AES-NI/VAES hardware: 22-28 GB/s per core here
    against 13) where both ends have the compiled record layer, else AES-256-GCM, which
    every build runs (the ``cryptography`` package). The dialling end lists the ciphers
    it runs in its sealed hello, the accepting end answers with the first it runs too
    (:func:`agree_cipher`), and the cipher is part of the keys' HKDF label: nobody on the
    path can change the choice, and two ends that disagreed would fail their first
    record. AEGIS-256X4 takes the same 32-byte key; its 32-byte nonce is the record's
    12-byte one zero-padded; the tag stays 16 bytes, so the record format is the same.
    An AEGIS-256X4 record of 64 KiB or more that the caller's buffer holds whole is read
    as integrity records are: straight into that buffer, each piece decrypted in place by
    the compiled layer as it lands (still in the core's cache; no receive buffer, no
    second pass), handed over once the tag passed, wiped if it fails or the stream ends
    inside it. A large AEGIS-256X4 frame is one compiled call each way, as a large
    integrity frame is (below).

The record's length is authenticated too (associated data, or the MAC's own length
block: GHASH's, AEGISMAC's finalization), and its abort bit through the nonce's kind.
Keys: HKDF-SHA256 (RFC 5869) over the job secret, salted with the two fresh nonces of this
connection's handshake and bound to the mode (and cipher, or AEGISMAC-128X4), the job id
and both ranks, gives one key per direction (as WireGuard and TLS 1.3 do), never one key
for two algorithms; a record's nonce is its kind and 64-bit sequence number in that
direction, never sent. A flipped bit, a replayed, dropped,
duplicated, reordered or re-spliced record therefore fails the tag check and raises
:class:`~terascale._errors.LinkTampered` (an ``AuthError``) on the receiving rank, which
aborts the job like any failure of a collective; the tampered link stays refused. Traffic
volume and timing are not hidden, and dropping traffic stops the job (``PeerLost`` or
``PeerTimeout``), as it would on any network.

A third mode, ``plain`` (no records), exists only for measuring what the other two cost
(``terascale bench allreduce --encrypt``): a rank gets it only by asking for it itself
(TERASCALE_UNAUTHENTICATED_BENCHMARK=1), never from a peer or the rendezvous, and a rank
refuses a link whose peer runs a weaker mode than its own.

Tuning: a record holds at most ``RECORD`` (256 KiB) of plaintext when encrypting and
``RECORD_MAC`` (1 MiB) in integrity mode, so the cipher runs on large buffers (several
GB/s per core with AES-NI; the MACs tens of GB/s) and the per-record cost (20 bytes, one call)
stays small, while a record is still in the core's cache when the kernel copies it
(encrypted records are not made larger: a receiver of an earlier build refuses a record
over 256 KiB, and within one compiled call a record costs one ``sendmsg`` and 20 bytes); a
link's receive buffer holds two records (allocated when it first receives). A frame of up
to 64 KiB is one record (4 KiB messages pay one record each way). Up to 32 KiB, the
compiled record layer (:mod:`._seclink`, C on OpenSSL's libcrypto, cipher contexts keyed
once per link) does a record in one call each way: it gathers the frame's pieces, seals
them (encrypting straight from the pieces) and sends the record with one ``send``; it
reads what the kernel has with one ``recv``, opens the record at its front and scatters
it into the caller's header and payload buffers. That took the CPU time of a 4 KiB frame
from 8 to under 5 us against 2.7 us unauthenticated (``docs/benchmarks/security.md``).
Under AEGISMAC-128X4, and under GMAC where the CPU has VPCLMULQDQ (AVX-512), the compiled
layer tags and checks integrity records of every size itself (one MAC interface, start,
update, final: libaegis, or a GHASH of its own, ``_ghash.c``: 512-bit carry-less
multiplication, 64 blocks a step, one reduction per step, as fast as the ``cryptography``
wheel's OpenSSL and twice as fast as a system libcrypto 3.0), with no Python turn inside.
There, a frame of integrity records larger than ``_JOIN`` is one compiled call each way
(``Records.send_frame``: its header's record and its payload's records tagged and sent from
the caller's buffers in one ``sendmsg`` per record, while the kernel takes them whole;
``Records.recv_frame``: the header's record read with the next record's length, checked and
copied out, the payload's records then read in place and hashed as they land), with the GIL
released, instead of several Python calls per record: the records on the wire are the same.
So is a frame of AEGIS-256X4 records larger than ``_JOIN`` (``send_frame``: each record
sealed from the caller's buffer into the send buffer, the header's and the payload's first
in one ``sendmsg``; ``recv_frame``: the header's record decrypted straight into its buffer,
the payload's records read in place one after the other, each decrypted as it lands, as
:meth:`SecureLink._direct` reads it, while the kernel has them): at 1 MiB that took rank
0's CPU per ring allreduce from 1.64-1.73x to 1.43-1.47x plain on a loaded 2-core Zen 4
(``docs/benchmarks/security.md``). Encrypted AES-256-GCM records above 32 KiB, every record where the module is not built
(or ``TERASCALE_NO_CEXT=1``), and GMAC records above 32 KiB without VPCLMULQDQ go
through the ``cryptography`` package, which writes the same bytes: its own OpenSSL runs
GCM about twice as fast as a system libcrypto 3.0. Other AEGIS-256X4 records above 32 KiB
(a frame of at most ``_JOIN``, the rest of a payload after ``recv_frame``) are sealed and
opened by the compiled layer's libaegis from this module's record path, with the GIL
released (``_Aegis``: the same calls as ``cryptography``'s AESGCM). Its
small-frame path is one pass too: copied once into the send buffer (or, encrypting, the
staging buffer), its tag written in place (``encrypt_into``), sent with one ``send``;
received with one ``recv_into`` and opened straight into the caller's buffers. A larger
payload's header is a record of its own, sent in one ``sendmsg`` with the payload's first
record, so that the payload is sealed straight from the caller's buffer into a fixed one
(no copy, no allocation per record), and a record the caller's buffer holds whole is
opened straight into it: beside AES-GCM itself, encryption costs the ciphertext's own trip
through the kernel, not extra copies of the plaintext. The sender seals and sends records
while the kernel takes them, keeps at most those two records pending and reports their
bytes sent only once the kernel took all of them, so a partly sent record is never
mistaken for a partly sent frame: the pending records stand for the first bytes of
whatever the caller sends next. A failing rank's
ABORT goes out after it as an abort record (the top bit of its length, and a nonce of its
own kind, authenticated like any record): the peer abandons the frame it was reading and
reads the ABORT, so a frame stopped half-way is never completed with filler.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from .._cext import load as _load_compiled
from .._env import read_setting
from .._errors import AuthError, ConfigError, LinkTampered
from .._pages import mapping
from ._tcp_stream import drop_sent

__all__ = ["CIPHERS", "MACS", "MODES", "RECORD", "RECORD_MAC", "SecureLink", "agree_cipher",
           "chosen_cipher", "ciphers", "hello_refused", "recv_hello", "stronger"]

MODES = ("plain", "integrity", "encrypt")  # weakest first
# The AEADs of encrypted records, preferred first. AES-256-GCM is the floor every build has
# (the ``cryptography`` package); AEGIS-256X4 needs the compiled record layer.
GCM, AEGIS = "aes-256-gcm", "aegis-256x4"
CIPHERS = (AEGIS, GCM)
# The MACs of integrity records, preferred first. GMAC (AES-256-GCM with nothing to encrypt)
# is the floor every build has; AEGISMAC-128X4 needs the compiled record layer and a CPU on
# which libaegis runs the AES round in hardware.
GMAC, AEGISMAC = "aes-256-gmac", "aegismac-128x4"
MACS = (AEGISMAC, GMAC)
# An accepting end's sealed answer to a hello that failed its tag after a good handshake
# (altered on the path): the dialling end fails at once with an AuthError (recv_hello,
# hello_refused).
HELLO_ALTERED = "hello failed its authentication tag"


def ciphers(mode: str = "encrypt") -> tuple[str, ...]:
    """What this process can run links of ``mode`` with, preferred first. Encrypting:
    AEGIS-256X4 where the compiled record layer is built (and ``TERASCALE_NO_CEXT`` is
    unset), then AES-256-GCM, which every build has. Integrity (any other mode): the MACs,
    AEGISMAC-128X4 where the compiled layer is built and libaegis runs it on the CPU's AES
    instructions (AES-NI, VAES, ARMv8 or POWER crypto; about twice GMAC's speed on VAES
    hardware), then GMAC, which every build has."""
    mod = _compiled()
    if mode == "encrypt":
        return CIPHERS if mod is not None else (GCM,)
    return MACS if mod is not None and mod.AEGIS_HARDWARE and not _gmac_only() else (GMAC,)


def _gmac_only() -> bool:
    """``TERASCALE_LINK_MAC=gmac``: this process offers GMAC alone for integrity links (to
    compare the two MACs, or to keep a job's links on one)."""
    value = (read_setting("TERASCALE_LINK_MAC") or "").strip().lower()
    if value not in ("", "auto", "gmac"):
        raise ConfigError(f"TERASCALE_LINK_MAC={value!r}: 'gmac' (GMAC only) or 'auto' "
                          "(AEGISMAC-128X4 where the CPU runs it in hardware, else GMAC)")
    return value == "gmac"


def _floor(mode: str) -> str:
    return GCM if mode == "encrypt" else GMAC


def agree_cipher(offered: Any, mode: str = "encrypt") -> str:
    """The cipher (encrypting) or MAC (integrity) of a link in ``mode``: the first of
    ``offered`` (the dialling side's :func:`ciphers`, from its sealed hello) that this
    process runs too.

    The hellos are sealed and the choice is bound into the link's keys (:func:`link_keys`),
    so nobody on the path can steer it; a peer that names none (or none of ours) gets
    AES-256-GCM, or GMAC, which every build runs (named ``aes-256-gcm`` for a peer whose
    offer names no MACs: a build that predates them calls GMAC by its cipher's name).

    Parameters
    ----------
    offered
        The dialling side's list, preferred first (anything else counts as none).
    mode
        This side's link mode (``"encrypt"``, else the integrity MACs are agreed).
    """
    mine = ciphers(mode)
    if isinstance(offered, list):
        for c in offered:
            if c in mine:
                return str(c)
        if mode != "encrypt" and not any(c in MACS for c in offered):
            return GCM  # a peer that offers no MACs knows GMAC by its cipher's name
    return _floor(mode)


def chosen_cipher(theirs: Any, rank: int, peer: int, mode: str = "encrypt") -> str:
    """The cipher (or MAC) the accepting ``peer`` chose in its sealed hello ``theirs`` (a
    dict), after :func:`agree_cipher` on its side: it must be one this ``rank`` offered for
    ``mode``, else :class:`AuthError`. A peer that names none chose AES-256-GCM (GMAC)."""
    cipher = theirs.get("cipher", _floor(mode))
    if mode != "encrypt" and cipher == GCM:
        cipher = GMAC  # a peer that knows no MACs names GMAC by its cipher's name
    if cipher not in ciphers(mode):
        what = "cipher" if mode == "encrypt" else "MAC"
        raise AuthError(f"rank {rank}: rank {peer} chose {what} {cipher!r}, which this rank "
                        f"did not offer ({', '.join(ciphers(mode))})")
    return str(cipher)


def recv_hello(channel: Any, conn: socket.socket, deadline: float, what: str) -> Any:
    """The accepting end's receive of a dialer's sealed hello (``channel`` an
    :class:`terascale._auth.Channel` after a good handshake). A hello that fails its tag came
    from a dialer that proved the secret, altered on the path (or from a rank of another job
    on the same secret, which cannot open it): the dialer is told so, sealed, so that it
    fails at once (:func:`hello_refused`) instead of dialling again through the same path
    until its deadline; :class:`LinkTampered` is raised here."""
    try:
        return channel.recv(conn, deadline, what=what)
    except LinkTampered:
        # (no rank in the answer: a dialer of a release that knows no refusal then fails at
        # once on "reached rank None instead" rather than on a link security of None)
        channel.send(conn, {"refused": HELLO_ALTERED}, deadline)
        raise


def hello_refused(theirs: Any, peer: int) -> None:
    """Raise :class:`AuthError` when the accepting ``peer``'s sealed answer ``theirs`` says
    this rank's hello failed its tag (:func:`recv_hello`)."""
    if isinstance(theirs, dict) and theirs.get("refused") == HELLO_ALTERED:
        raise AuthError(f"rank {peer} says this rank's hello failed its authentication tag: "
                        "altered on the path")


def stronger(mine: str, theirs: str) -> str:
    """The stronger of two link modes; an unknown ``theirs`` leaves ``mine``.

    Parameters
    ----------
    mine
        This side's link mode (``"integrity"`` or ``"encrypt"``).
    theirs
        The other side's.
    """
    if theirs not in MODES:
        return mine
    return max(mine, theirs, key=MODES.index)

RECORD = 256 << 10
# Integrity records sealed straight from the caller's buffer may be larger: the MAC is cheap, so
# fewer records means fewer system calls and Python turns per byte, and a record this size
# is still in the core's cache (2 MiB of L2 here) when the kernel copies it after its tag.
RECORD_MAC = 1 << 20
_TAG = 16
_LEN = struct.Struct(">I")
# A record's nonce: its kind (0 data, 1 abort) and its 64-bit sequence number; an abort
# record also sets the top bit of its length.
_NONCE = struct.Struct("<IQ")
_ABORT = 1 << 31
_JOIN = 64 << 10  # a frame's payload up to this travels in one record with its header
_DIRECT = 64 << 10  # integrity mode reads a record this large straight into the caller's buffer
# The compiled layer seals and opens records up to this size on libcrypto: above it the
# per-record Python matters less than GCM itself, which the ``cryptography`` wheel's own
# OpenSSL runs about twice as fast as a system libcrypto 3.0 does; integrity records of any
# size where it runs the MAC itself (``SecureLink._fast``; docs/benchmarks/security.md).
_C_MAX = 32 << 10


def _has_into() -> bool:
    """Whether ``cryptography``'s AESGCM seals and opens in place (newer releases); else
    one copy more. Asked by a link whose records go through it (AES-256-GCM, GMAC), not at
    import: a link on the compiled layer's AEGIS-256X4 or AEGISMAC-128X4 never loads
    ``cryptography`` (~6 MB of resident library pages in every rank that joins)."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        return False
    return hasattr(AESGCM, "encrypt_into") and hasattr(AESGCM, "decrypt_into")


def _compiled() -> Any:
    return _load_compiled("terascale.transport._seclink", 6)


def _records(mine: bytes, theirs: bytes, encrypt: bool, cipher: str = GCM) -> Any:
    """The compiled record layer for one link (:mod:`._seclink`: AES-256-GCM contexts on
    libcrypto, keyed once, or AEGIS-256X4 and AEGISMAC-128X4 on libaegis), or None where it
    was not built or ``TERASCALE_NO_CEXT`` is set (then every record goes through
    ``cryptography``; the bytes on the wire are the same, and links agree on AES-256-GCM or
    GMAC)."""
    mod = _compiled()
    return None if mod is None else mod.Records(mine, theirs, encrypt, cipher=cipher)


class _Aegis:
    """One direction of a link's AEGIS-256X4 (the compiled layer's ``seal``/``open``) behind
    the calls :class:`SecureLink` makes of ``cryptography``'s ``AESGCM``, so that both
    ciphers share one record path. A failed tag raises ``ValueError`` (AESGCM: InvalidTag),
    with nothing handed over: the destination is wiped."""

    def __init__(self, records: Any) -> None:
        self._r = records

    def encrypt_into(self, nonce: bytes, data: Any, aad: Any, out: Any) -> None:
        self._r.seal(nonce, data, aad, out)

    def encrypt(self, nonce: bytes, data: Any, aad: Any) -> bytes:
        out = bytearray(len(data) + _TAG)
        self._r.seal(nonce, data, aad, out)
        return bytes(out)

    def decrypt_into(self, nonce: bytes, body: Any, aad: Any, dest: Any) -> None:
        if not self._r.open(nonce, body, aad, dest):
            raise ValueError("authentication tag")

    def decrypt(self, nonce: bytes, body: Any, aad: Any) -> bytes:
        dest = bytearray(len(body) - _TAG)
        self.decrypt_into(nonce, body, aad, dest)
        return bytes(dest)


class _AegisMac:
    """One link's AEGISMAC-128X4 (the compiled layer's ``tag``/``check``) behind the calls
    :class:`SecureLink` makes of ``cryptography``'s ``AESGCM`` for GMAC (nothing to
    encrypt, the record's plaintext as associated data), so that both MACs share one record
    path. A failed tag raises ``ValueError`` (AESGCM: InvalidTag)."""

    def __init__(self, records: Any) -> None:
        self._r = records

    def encrypt(self, nonce: bytes, data: Any, aad: Any) -> bytes:
        kind, seq = _NONCE.unpack(nonce)
        return bytes(self._r.tag(seq, kind, aad))

    def encrypt_into(self, nonce: bytes, data: Any, aad: Any, out: Any) -> None:
        out[:] = self.encrypt(nonce, data, aad)

    def decrypt(self, nonce: bytes, tag: Any, aad: Any) -> bytes:
        kind, seq = _NONCE.unpack(nonce)
        if not self._r.check(seq, kind, aad, tag):
            raise ValueError("authentication tag")
        return b""


def _aead(key: bytes):  # type: ignore[no-untyped-def]
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ConfigError("authenticated links need the cryptography package (a dependency "
                          "of terascale): pip install 'cryptography>=42'") from None
    return AESGCM(key)


def link_keys(secret: bytes, nonces: bytes, job: str, dialer: int, acceptor: int,
              mode: str = "encrypt", cipher: str = GCM) -> tuple[bytes, bytes]:
    """(dialer -> acceptor key, acceptor -> dialer key) for one connection in ``mode`` (and
    ``cipher``, encrypting, or AEGISMAC-128X4, in integrity mode: the agreed algorithm is
    part of the label, so two ends that disagree on it, whatever made them, share no key and
    fail their first record, and no key serves two algorithms)."""
    from .._auth import derive_keys

    what = f"{mode}|{cipher}" if mode == "encrypt" or cipher == AEGISMAC else mode
    return derive_keys(secret, nonces, f"link|{what}|{job}|{dialer}>{acceptor}")


def _buffer(n: int) -> Any:
    """``n`` zero bytes, writable, whose pages are mapped only as they are first written
    (a private anonymous mapping, :func:`terascale._pages.mapping`): a link's buffers are
    sized for its largest records (2 MiB to receive integrity records), but records of 64
    KiB or more are read straight into the caller's buffer, so a link whose frames are
    small or read in place touches a few of their pages, not all of them (``bytearray``
    writes every page: 2.6 MB of an ``-n 2`` worker's resident set)."""
    return mapping(n, huge=False)


def _bytes_view(buf: Any) -> memoryview:
    """``buf`` (a memoryview, bytes, a contiguous numpy array) as a view of its bytes."""
    if type(buf) is memoryview and buf.format == "B" and buf.ndim == 1:
        return buf
    return memoryview(buf).cast("B")


def _after(bufs: list[Any], n: int) -> list[memoryview]:
    """The bytes of ``bufs`` past their first ``n``, as views (empty ones left out)."""
    rest = []
    for b in map(_bytes_view, bufs):
        if n >= len(b):
            n -= len(b)
        else:
            rest.append(b[n:])
            n = 0
    return rest


class SecureLink:
    """A non-blocking socket look-alike that authenticates (and with ``encrypt``,
    encrypts) everything sent over ``sock``."""

    def __init__(self, sock: socket.socket, secret: bytes, nonces: bytes, job: str, *,
                 dialer: int, acceptor: int, rank: int, peer: int,
                 encrypt: bool = True, cipher: str = GCM) -> None:
        self.mode = "encrypt" if encrypt else "integrity"
        # the records' algorithm: the agreed cipher, or MAC (GMAC is AES-256-GCM's)
        self.cipher = cipher if encrypt or cipher != GCM else GMAC
        if self.cipher not in ciphers(self.mode):
            raise ConfigError(f"rank {rank}: cipher {cipher!r} for the link with rank {peer} "
                              f"is not one this process runs ({', '.join(ciphers(self.mode))})")
        self._encrypt = encrypt
        self._rec = RECORD if encrypt else RECORD_MAC  # the largest record either way
        d2a, a2d = link_keys(secret, nonces, job, dialer, acceptor, self.mode, self.cipher)
        mine, theirs = (d2a, a2d) if rank == dialer else (a2d, d2a)
        self._sock = sock
        self._c = _records(mine, theirs, encrypt, self.cipher)
        self._into = True  # records sealed and opened in place (encrypt_into, decrypt_into)
        if self.cipher == AEGIS:
            self._seal = self._open = _Aegis(self._c)  # (its keys are per direction)
        elif self.cipher == AEGISMAC:
            self._seal = self._open = _AegisMac(self._c)
        else:
            self._seal, self._open = _aead(mine), _aead(theirs)
            self._into = _has_into()
        self.rank, self.peer = rank, peer
        self._sent = 0  # records sealed
        self._opened = 0  # records opened
        self._out: list[memoryview] = []  # the pending record's bytes not yet in the kernel
        self._out_plain = 0  # plaintext bytes that record stands for
        self._wbuf = bytearray()  # where records are sealed; allocated at the first send
        self._wv = memoryview(self._wbuf)
        self._stage = bytearray()  # a header and a small payload, staged for one record
        self._sv = memoryview(self._stage)
        # Received ciphertext raw[rstart:rlen] not opened yet, and opened plaintext
        # plain[pstart:pend] not read yet: fixed buffers and offsets. Allocated at the first
        # receive (links that never carry data, e.g. a rank's non-neighbours, cost nothing).
        self._raw = bytearray()
        self._rawv = memoryview(self._raw)  # a view of it, kept (it is never resized)
        self._rstart = self._rlen = 0
        self._plain = bytearray()
        self._pstart = self._pend = 0
        self._eof = False
        self._aborted = False  # the peer sent an abort record: only its ABORT frame is left
        # A record being read straight into the caller's buffer (._direct): where its
        # plaintext goes, how much of it and of its tag arrived.
        self._dview: memoryview | None = None
        self._dgot = self._tgot = 0
        self._dtag = bytearray(_TAG)
        self._broken: LinkTampered | None = None

    @property
    def _fast(self) -> bool:
        """Whether the compiled layer runs the integrity MAC itself (AEGISMAC-128X4, or GMAC
        on its own GHASH where the CPU has VPCLMULQDQ, ``_ghash.c``), as fast as the wheel's
        or faster and without a Python turn: then it tags and checks integrity records of
        any size."""
        return self._c is not None and self._c.fast

    @property
    def _frames(self) -> bool:
        """Whether a large frame is sent, and received, in one compiled call each
        (``Records.send_frame``, ``Records.recv_frame``): integrity records tagged and
        checked by the compiled MAC, AEGIS-256X4 records sealed and opened by libaegis."""
        c = self._c
        return c is not None and (self.cipher == AEGIS if self._encrypt else bool(c.fast))

    @property
    def _dc(self) -> bool:
        """Whether the compiled layer reads a large record in place and opens each piece of
        it as it lands (:meth:`_direct`): AEGIS-256X4 records decrypted in place, integrity
        records hashed by its own MAC."""
        c = self._c
        return c is not None and (self.cipher == AEGIS if self._encrypt else bool(c.fast))

    @property
    def _inplace(self) -> bool:
        """Whether records of ``_DIRECT`` bytes or more are read straight into the caller's
        buffer and opened there (:meth:`_direct`): integrity records always, encrypted
        ones where the compiled layer decrypts them in place (:attr:`_dc`)."""
        return not self._encrypt or self._dc

    # -- what the mesh needs of a socket ---------------------------------------------------
    def fileno(self) -> int:
        return self._sock.fileno()

    def setblocking(self, flag: bool) -> None:
        if flag:
            raise ValueError("a SecureLink is non-blocking")
        self._sock.setblocking(False)

    def setsockopt(self, *args: int) -> None:
        self._sock.setsockopt(*args)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()

    # -- sending ---------------------------------------------------------------------------
    def sendmsg(self, views: list[Any]) -> int:
        """Seal and send records of ``views`` while the kernel takes them whole; returns the
        plaintext bytes now wholly in the kernel (as a socket's ``sendmsg`` returns what it
        took: a caller that sends one call's worth, such as a two-rank swap, is not sent
        back to its slow path after the first record)."""
        if self._out and self._frames:  # the pending records first, then the rest compiled
            n = self._send_record(views)
            if not n or self._out:
                return n
            rest = _after(views, n)
            if not rest:
                return n
            try:
                return n + self.sendmsg(rest)
            except BlockingIOError:
                return n
        if not self._out:
            if (c := self._c) is not None:
                if not self._wbuf:
                    self._alloc_send()
                r = c.send_small(self._sock.fileno(), views, self._sent, self._wbuf, _C_MAX)
                if r is None and self._frames:  # a large integrity frame: one compiled call
                    r = c.send_frame(self._sock.fileno(), views, self._sent, self._wbuf,
                                     self._rec, _JOIN)
                    if r is not None:
                        return self._sent_frame(views, r)
                if r is None and self._into:
                    r = self._send_small(views)
                    if r is not None:
                        return r
                elif r is not None:
                    n, k, end = r
                    if n:
                        self._sent += 1
                        if k < end:  # sealed, not all sent: as in _send_small
                            self._out = [self._wv[k:end]]
                            self._out_plain = n
                            return 0
                    return n
            elif self._into:
                n = self._send_small(views)
                if n is not None:
                    return n
        views = [v for v in map(_bytes_view, views) if len(v)]
        total = 0
        while views:
            try:
                n = self._send_record(views)
            except BlockingIOError:
                if total:
                    return total
                raise
            if not n:
                return total  # a record is pending: it stands for the bytes after ``total``
            total += n
            drop_sent(views, n)
        return total

    def _sent_frame(self, views: list[Any], r: tuple[int, int, int, int, int, int]) -> int:
        """What ``Records.send_frame`` did: the records it sealed counted, the one the kernel
        did not take whole kept pending (as :meth:`_send_record` keeps it); the plaintext
        bytes wholly in the kernel."""
        done, sealed, gsent, ghead, goff, glen = r
        self._sent += sealed
        if gsent >= 0 and self._encrypt:  # sealed into the send buffer, the header's first
            end = (_LEN.size + ghead + _TAG if ghead >= 0 else 0) + _LEN.size + glen + _TAG
            self._out, self._out_plain = [self._wv[:end]], max(ghead, 0) + glen
            self._trim(gsent)
        elif gsent >= 0:
            wv = self._wv
            out = [wv[:_LEN.size], _bytes_view(views[0]), wv[_LEN.size: _LEN.size + _TAG]] \
                if ghead >= 0 else []
            at = _LEN.size + _TAG
            out += [wv[at: at + _LEN.size], _bytes_view(views[-1])[goff: goff + glen],
                    wv[at + _LEN.size: at + _LEN.size + _TAG]]
            self._out, self._out_plain = out, max(ghead, 0) + glen
            self._trim(gsent)
        return done

    def _send_small(self, views: list[Any]) -> int | None:
        """A frame of at most ``_JOIN`` bytes as one record, sealed and sent in one call:
        its pieces copied once (a few KiB) into the send buffer (``length | plaintext |
        tag``) or, encrypting, into the staging buffer and sealed from there into the send
        buffer. None for a larger frame (sealed from the caller's buffers instead)."""
        if not self._wbuf:
            self._alloc_send()
        wv = self._wv
        dest, at = (self._sv, 0) if self._encrypt else (wv, _LEN.size)
        start = at
        for v in views:
            if type(v) is not memoryview or v.format != "B" or v.ndim != 1:
                v = memoryview(v).cast("B")
            k = len(v)
            if at + k - start > _JOIN:
                return None
            dest[at: at + k] = v
            at += k
        n = at - start
        if not n:
            return 0
        end = _LEN.size + n + _TAG
        _LEN.pack_into(wv, 0, n + _TAG)
        nonce = _NONCE.pack(0, self._sent)
        if self._encrypt:
            self._seal.encrypt_into(nonce, dest[:n], wv[: _LEN.size], wv[_LEN.size: end])
        else:
            self._seal.encrypt_into(nonce, b"", wv[_LEN.size: at], wv[at: end])
        self._sent += 1
        try:
            k = self._sock.send(wv[:end])
        except BlockingIOError:
            k = 0
        if k == end:
            return n
        # Sealed, not (all) sent: the record stands for the caller's next n bytes, counted
        # as sent once the rest went (the next call, or flush).
        self._out = [wv[k:end]]
        self._out_plain = n
        return 0

    def _send_record(self, views: list[memoryview]) -> int:
        """Seal up to RECORD bytes of ``views`` (a frame's header and the first record of
        its large payload: both); plaintext bytes now wholly in the kernel."""
        fresh = not self._out
        if fresh:
            if not self._wbuf:  # sealed records go here: no allocation per record
                self._alloc_send()
            first = views[0]
            rest = sum(len(v) for v in views[1:]) if len(views) > 1 else 0
            if len(views) == 1 or len(first) >= RECORD or rest >= _JOIN:
                # Sealed straight from the caller's buffer. A frame's header before a large
                # payload is a record of its own, sent with the payload's first record in one
                # call: no copy of the payload, no system call more.
                plain: memoryview = first[:RECORD if self._encrypt else RECORD_MAC]
                then = views[1] if len(views) > 1 and len(first) <= _JOIN else None
            else:  # a header and a small payload: staged together, one record, one send
                stage, n = self._sv, 0
                for v in views:
                    k = min(len(v), RECORD - n)
                    stage[n: n + k] = v[:k]
                    n += k
                    if n == RECORD:
                        break
                plain, then = stage[:n], None
            self._out, self._out_plain = [], 0
            at = self._seal_record(plain, 0)
            if then is not None:
                self._seal_record(then[:RECORD if self._encrypt else RECORD_MAC], at)
        try:
            k = self._sock.sendmsg(self._out)
        except BlockingIOError:
            if fresh:
                return 0  # sealed but not sent: the record holds the caller's next bytes
            raise
        self._trim(k)
        while self._out:
            try:
                k = self._sock.sendmsg(self._out)
            except BlockingIOError:
                return 0  # partly sent: the caller's bytes count as sent once all went
            self._trim(k)
        n, self._out_plain = self._out_plain, 0
        return n

    def _seal_record(self, plain: memoryview, at: int) -> int:
        """Seal ``plain`` as the next record and queue it after what is pending; encrypted
        records are written to the send buffer from ``at``. Returns where the next one goes."""
        n = len(plain)
        head = _LEN.pack(n + _TAG)
        nonce = self._nonce(self._sent)
        if self._encrypt:
            out = self._wv[at: at + _LEN.size + n + _TAG]
            out[: _LEN.size] = head
            if self._into:
                self._seal.encrypt_into(nonce, plain, head, out[_LEN.size:])
            else:  # an older cryptography: one copy more
                out[_LEN.size:] = self._seal.encrypt(nonce, bytes(plain), head)
            self._out.append(out)
            at += len(out)
        else:  # a MAC: the plaintext goes out as it is, from where it lies
            tag = self._c.tag(self._sent, 0, plain) if self._c is not None and \
                (n <= _C_MAX or self._fast) else self._seal.encrypt(nonce, b"", plain)
            self._out += [memoryview(head), plain, memoryview(tag)] if n else \
                [memoryview(head), memoryview(tag)]
        self._sent += 1
        self._out_plain += n
        return at

    def _alloc_send(self) -> None:
        # a record, and a frame's header record before it (pages mapped as they are
        # written: _buffer)
        self._wbuf = _buffer(2 * (_LEN.size + _TAG) + _JOIN + RECORD)
        self._wv = memoryview(self._wbuf)
        self._stage = _buffer(RECORD)
        self._sv = memoryview(self._stage)

    def _alloc_raw(self) -> None:
        self._rawv.release()
        # whole records plus a partial one
        self._raw = _buffer(2 * (self._rec + _TAG + _LEN.size))
        self._rawv = memoryview(self._raw)

    def _trim(self, k: int) -> None:
        out = self._out
        while out and k >= len(out[0]):
            k -= len(out.pop(0))
        if k:
            out[0] = out[0][k:]

    def send(self, data: bytes | memoryview) -> int:
        return self.sendmsg([memoryview(data)])

    def queue_abort(self, frame: bytes) -> None:
        """Queue ``frame`` (the mesh's ABORT frame) as an abort record, after the pending
        record if any; :meth:`flush` sends it. The receiver abandons the frame it was
        reading -- a frame this rank stopped half-way is never completed with filler that
        the peer would take for data -- and reads the ABORT frame instead."""
        n = len(frame)
        head = _LEN.pack((n + _TAG) | _ABORT)
        nonce = _NONCE.pack(1, self._sent)
        self._sent += 1
        if self._encrypt:
            self._out.append(memoryview(head + self._seal.encrypt(nonce, frame, head)))
        else:
            self._out += [memoryview(head), memoryview(frame),
                          memoryview(self._seal.encrypt(nonce, b"", frame))]
        self._out_plain = 0

    def flush(self) -> bool:
        """Send what is pending; True once all of it is in the kernel."""
        while self._out:
            try:
                k = self._sock.sendmsg(self._out)
            except BlockingIOError:
                return False
            self._trim(k)
        return True

    # -- receiving -------------------------------------------------------------------------
    def recv_into(self, buf: memoryview, nbytes: int = 0, flags: int = 0) -> int:
        return self.recvmsg_into([buf])[0]

    def recvmsg_into(self, bufs: list[memoryview]) -> tuple[int, list[object], int, None]:
        if self._pstart == self._pend and self._broken is None and not self._aborted:
            if self._dview is not None:
                if self._frames:  # an integrity record on its way in place: one compiled call
                    if not (k := self._direct(self._dview)):
                        raise BlockingIOError("no whole record yet")
                    return k, [], 0, None
                return self._recv_general(bufs)
            if self._frames and self._rstart == self._rlen and len(bufs) <= 2 and \
                    len(bufs[-1]) >= _DIRECT:
                return self._recv_frame(bufs)
            if self._c is not None:
                return self._recv_compiled(bufs)
            got = self._recv_small(bufs)
            if got is not None:
                return got, [], 0, None
        return self._recv_general(bufs)

    def _recv_small(self, bufs: list[Any]) -> int | None:
        """The common case in one pass: read what the kernel has (one call), open the whole
        data record at its front straight into ``bufs`` (scattered: a frame's header and
        payload), then anything else through the general path. None when the next record is
        not such a one (partial, an abort record, larger than ``bufs``, bound for
        :meth:`_direct`): the general path takes it."""
        views = []
        room = 0
        for b in bufs:
            if type(b) is not memoryview or b.format != "B" or b.ndim != 1:
                b = memoryview(b).cast("B")
            views.append(b)
            room += len(b)
        if self._rstart == self._rlen:  # nothing buffered: what the kernel has
            if not room or self._inplace and room >= _DIRECT:
                return None
            if not self._raw:
                self._alloc_raw()
            try:
                k = self._sock.recv_into(self._rawv)
            except InterruptedError:
                return None
            # BlockingIOError: nothing buffered and nothing came, as the general path says
            if not k:
                self._eof = True
                return 0
            self._rstart, self._rlen = 0, k
        at = self._rstart
        if self._rlen - at < _LEN.size:
            return None
        size = _LEN.unpack_from(self._raw, at)[0]  # an abort record's top bit: not here
        n = size - _TAG
        if not 0 <= n <= room or size > self._rec + _TAG or self._rlen - at < _LEN.size + size:
            return None
        b0 = views[0]
        if len(b0) >= n:  # opened in place
            self._open_into(b0[:n])
            rest = [b0[n:], *views[1:]] if n < len(b0) else views[1:]
        else:  # opened whole, then scattered
            body = self._rawv[at + _LEN.size: at + _LEN.size + size]
            nonce = _NONCE.pack(0, self._opened)
            try:
                if self._encrypt:
                    plain = self._sv if self._stage else self._scratch()
                    self._open.decrypt_into(nonce, body, self._rawv[at: at + _LEN.size],
                                            plain[:n])
                else:  # a MAC: check the tag, then hand the plaintext over
                    self._open.decrypt(nonce, body[n:], body[:n])
                    plain = body
            except Exception:  # cryptography's InvalidTag
                self._tampered(f"record #{self._opened} failed its authentication tag")
            self._opened += 1
            self._rstart = at + _LEN.size + size
            rest, src = [], 0
            for b in views:
                if src < n:
                    k = min(len(b), n - src)
                    b[:k] = plain[src: src + k]
                    src += k
                    if k < len(b):
                        rest.append(b[k:])
                else:
                    rest.append(b)
        if rest and self._rstart < self._rlen:  # more records waiting: read them too
            try:
                return n + self._recv_general(rest)[0]
            except BlockingIOError:
                pass
        return n

    def _recv_frame(self, bufs: list[Any]) -> tuple[int, list[object], int, None]:
        """A large frame's header record and its payload's records read in place, while
        the kernel has them, in one compiled call (``Records.recv_frame``), or the next
        records of a payload (``bufs``: its rest); anything else the general path takes,
        from what that call left in the receive buffer."""
        if not self._raw:
            self._alloc_raw()
        status, got, opened, self._rstart, self._rlen, dlen, dgot, tgot = self._c.recv_frame(
            self._sock.fileno(), self._raw, bufs, self._opened, _DIRECT, self._rec, self._dtag)
        if status == -1:
            return self._recv_general(bufs)
        if status == -4:
            raise BlockingIOError("no whole record yet")
        if status == -2:
            self._eof = True
            return 0, [], 0, None
        self._opened += opened
        if status == -3:
            self._tampered(f"record #{self._opened} failed its authentication tag")
        if status == -5:
            self._eof = True
            self._tampered("the connection closed inside a record")
        if dlen:  # on its way in place, after the payload's records handed over
            at = got - len(_bytes_view(bufs[0])) if len(bufs) == 2 else got
            self._dview = _bytes_view(bufs[-1])[at: at + dlen]
            self._dgot, self._tgot = dgot, tgot
        if not got:
            raise BlockingIOError("no whole record yet")
        return got, [], 0, None

    def _recv_compiled(self, bufs: list[Any]) -> tuple[int, list[object], int, None]:
        """:meth:`_recv_small` in one compiled call (read, open, scatter); what it leaves
        (a partial, large or abort record) goes through the general path."""
        if not self._raw:
            self._alloc_raw()
        n, self._rstart, self._rlen = self._c.recv_small(
            self._sock.fileno(), self._raw, self._rstart, self._rlen, bufs, self._opened,
            _DIRECT if self._inplace else 1 << 62, _C_MAX)
        if n >= 0:
            self._opened += 1
            if self._rstart < self._rlen:  # more records waiting: read them too
                rest = _after(bufs, n)
                if rest:
                    try:
                        return n + self._recv_general(rest)[0], [], 0, None
                    except BlockingIOError:
                        pass
            return n, [], 0, None
        if n == -1:  # not for the compiled layer: larger records, partial or abort ones
            if self._rstart == self._rlen and self._inplace and len(bufs) <= 8:
                return self._recv_general(bufs)  # nothing buffered: a header, then _direct
            got = self._recv_small(bufs)
            if got is not None:
                return got, [], 0, None
            return self._recv_general(bufs)
        if n == -2:
            self._eof = True
            return 0, [], 0, None
        if n == -3:
            self._tampered(f"record #{self._opened} failed its authentication tag")
        raise BlockingIOError("no whole record yet")

    def _scratch(self) -> memoryview:
        self._stage = _buffer(RECORD)
        self._sv = memoryview(self._stage)
        return self._sv

    def _recv_general(self, bufs: list[Any]) -> tuple[int, list[object], int, None]:
        if self._broken is not None:  # a tampered link stays refused
            raise self._broken
        if self._aborted:
            raise ConnectionAbortedError(f"rank {self.peer} aborted the job")
        got = 0
        views = [_bytes_view(b) for b in bufs]
        for i, b in enumerate(views):
            while len(b):
                if self._pstart < self._pend:  # opened before (a peek, or a record too big)
                    k = min(len(b), self._pend - self._pstart)
                    b[:k] = memoryview(self._plain)[self._pstart: self._pstart + k]
                    self._pstart += k
                elif (self._dview is not None or self._inplace and len(b) >= _DIRECT
                      and self._rlen - self._rstart in (0, _LEN.size)) and \
                        (k := self._direct(b)) is not None:
                    if not k:
                        break  # a record read in place is on its way: nothing to hand over yet
                elif (size := self._record(self._cap(b, views, i))) is None:
                    break
                elif self._abort_next():
                    if got:
                        return got, [], 0, None
                    raise ConnectionAbortedError(f"rank {self.peer} aborted the job")
                elif size - _TAG <= len(b):  # the whole record fits: opened in place
                    k = size - _TAG
                    self._open_into(b[:k])
                else:
                    self._open_to_plain()
                    continue
                got += k
                b = b[k:]
            if len(b):
                break
        if not got:
            if self._eof:
                return 0, [], 0, None
            raise BlockingIOError("no whole record yet")
        return got, [], 0, None

    def recv(self, n: int, flags: int = 0) -> bytes:
        if self._broken is not None:
            raise self._broken
        if self._dview is not None:  # inside a record read in place: no frame boundary here
            raise BlockingIOError("inside a record")
        while not self._aborted and self._pend - self._pstart < n and \
                self._record() is not None and not self._abort_next():
            self._open_to_plain()
        if self._pstart == self._pend:
            if self._eof:
                return b""
            raise BlockingIOError("no whole record yet")
        data = bytes(self._plain[self._pstart: min(self._pstart + n, self._pend)])
        if not flags & socket.MSG_PEEK:
            self._pstart += len(data)
        return data

    def _direct(self, b: memoryview) -> int | None:
        """Read the next record's plaintext straight into ``b`` (integrity mode, a record of
        at least ``_DIRECT`` bytes that ``b`` holds whole), then check its tag there: no copy
        through the receive buffer. Returns its size once it arrived and passed, 0 while it
        is on its way (the bytes are not handed over before the tag passed: the caller
        offers the same buffer again), None when this record is not for this path (its
        length, if read, waits in the receive buffer for the ordinary one)."""
        if self._dview is None:
            if not self._raw:
                self._alloc_raw()
            if self._rlen - self._rstart != _LEN.size:  # its length, unless read before it
                self._rstart = self._rlen = 0
                try:
                    k = self._sock.recv_into(self._rawv[: _LEN.size])
                except (BlockingIOError, InterruptedError):
                    return 0
                if not k:
                    self._eof = True
                    return None
                self._rlen = k
                if k < _LEN.size:
                    return None
            field = _LEN.unpack_from(self._raw, self._rstart)[0]
            n = field - _TAG
            if field & _ABORT or not _DIRECT <= n <= min(len(b), self._rec):
                return None
            self._rstart = self._rlen = 0
            self._dview, self._dgot, self._tgot = b[:n], 0, 0
            if self._dc:
                self._c.direct_begin(self._opened, 0, _LEN.pack(field))
        view, tag = self._dview, memoryview(self._dtag)
        n = len(view)
        if self._dc:  # read and opened piece by piece in one compiled call
            self._dgot, self._tgot, status = self._c.recv_direct(
                self._sock.fileno(), view, self._dgot, self._dtag, self._tgot)
            if not status:
                return 0
            self._dview = None
            if status == -2:
                self._eof = True
                self._tampered("the connection closed inside a record")
            if status < 0:
                self._tampered(f"record #{self._opened} failed its authentication tag")
            self._opened += 1
            return n
        while self._dgot < n or self._tgot < _TAG:
            bufs = [view[self._dgot:], tag] if self._dgot < n else [tag[self._tgot:]]
            try:
                k = self._sock.recvmsg_into(bufs)[0]
            except (BlockingIOError, InterruptedError):
                return 0
            if not k:
                self._eof = True
                self._dview = None
                view[:] = bytes(n)  # nothing of an unauthenticated record is left behind
                self._tampered(f"the connection closed inside a record "
                               f"({self._dgot + self._tgot} bytes of it)")
            d = min(k, n - self._dgot)
            self._dgot += d
            self._tgot += k - d
            if k < sum(map(len, bufs)) and (self._dgot < n or self._tgot < _TAG):
                return 0  # the kernel had no more: no second call only to hear so
        self._dview = None
        if not self._check(0, view, self._dtag):
            view[:] = bytes(n)
            self._tampered(f"record #{self._opened} failed its authentication tag")
        self._opened += 1
        return n

    def _abort_next(self) -> bool:
        """If the next record is an abort record: open it in place of whatever plaintext is
        unread (a frame the peer abandoned) and refuse every later payload read."""
        if not _LEN.unpack_from(self._raw, self._rstart)[0] & _ABORT:
            return False
        self._pstart = self._pend = 0
        self._open_to_plain()
        self._aborted = True
        return True

    def _cap(self, b: memoryview, views: list[memoryview], i: int) -> int:
        """How far a first read may go when ``b`` (``views[i]``) is small and a buffer after
        it takes a record in place (integrity mode: a frame's header record, then its
        payload's): the record that fills ``b`` and the next one's length, so that the
        payload's records stay in the kernel for :meth:`_direct` instead of being copied
        through the receive buffer, and no system call reads the length alone. 0: no cap."""
        if not self._inplace or len(b) >= _DIRECT or self._rstart != self._rlen:
            return 0
        if any(len(x) >= _DIRECT for x in views[i + 1:]):
            return _LEN.size + len(b) + _TAG + _LEN.size
        return 0

    def _record(self, cap: int = 0) -> int | None:
        """The size of the whole record at ``raw[rstart:]`` (reading what the kernel has when
        there is none yet; the first read at most ``cap`` bytes, if given), or None. Records
        are opened only when the caller asks for them, so that each can be opened straight
        into the caller's buffer."""
        if (size := self._whole()) is not None:
            return size
        if self._eof:
            return None
        if not self._raw:
            self._alloc_raw()
        raw = self._raw
        if self._rstart == self._rlen:
            self._rstart = self._rlen = 0
        elif len(raw) - self._rlen < _LEN.size + self._rec + _TAG:  # the partial one to the front
            left = self._rlen - self._rstart
            raw[:left] = raw[self._rstart: self._rlen]
            self._rstart, self._rlen = 0, left
        limit = len(raw)
        if self._inplace and self._rlen - self._rstart >= _LEN.size:
            end = self._rstart + _LEN.size + (_LEN.unpack_from(raw, self._rstart)[0] & ~_ABORT)
            if end - self._rstart >= _DIRECT:  # a large record: read no further than its end,
                limit = min(end, limit)  # so that the next one can be read in place
        view = self._rawv
        first = min(limit, self._rlen + cap) if cap else limit
        while self._rlen < limit:
            try:
                k = self._sock.recv_into(view[self._rlen: first])
                first = limit
            except (BlockingIOError, InterruptedError):
                break
            if not k:
                self._eof = True
                break
            self._rlen += k
            if self._whole() is not None:
                break  # a whole record: no second call only to hear that nothing is left
        size = self._whole()
        if size is None and self._eof and self._rlen > self._rstart:
            self._tampered(f"the connection closed inside a record "
                           f"({self._rlen - self._rstart} bytes of it)")
        return size

    def _whole(self) -> int | None:
        have = self._rlen - self._rstart
        if have < _LEN.size:
            return None
        size = _LEN.unpack_from(self._raw, self._rstart)[0] & ~_ABORT
        if not _TAG <= size <= self._rec + _TAG:
            self._tampered(f"a record claims {size} bytes")
        return size if have >= _LEN.size + size else None

    def _open_to_plain(self) -> None:
        """Open the next record into the plaintext buffer (for a peek, or a small read)."""
        n = (_LEN.unpack_from(self._raw, self._rstart)[0] & ~_ABORT) - _TAG
        if self._pstart == self._pend:
            self._pstart = self._pend = 0
        if self._pend + n > len(self._plain):  # make room: unread bytes to the front
            unread = self._pend - self._pstart
            self._plain[:unread] = self._plain[self._pstart: self._pend]
            self._pstart, self._pend = 0, unread
            if unread + n > len(self._plain):
                self._plain.extend(bytes(unread + n - len(self._plain)))
        with memoryview(self._plain) as plain:
            self._open_into(plain[self._pend: self._pend + n])
        self._pend += n

    def _open_into(self, dest: memoryview) -> None:
        """Open the whole record at ``raw[rstart:]`` into ``dest`` (its exact size)."""
        at = self._rstart
        end = at + _LEN.size + len(dest) + _TAG
        raw = self._rawv
        head, body = raw[at: at + _LEN.size], raw[at + _LEN.size: end]
        nonce = _NONCE.pack(head[0] >> 7, self._opened)  # the top bit: an abort record
        try:
            if not self._encrypt:  # a MAC: check the tag, then hand the plaintext over
                if not self._check(head[0] >> 7, body[:-_TAG], body[-_TAG:]):
                    raise ValueError("tag")
                dest[:] = body[:-_TAG]
            elif self._into:
                self._open.decrypt_into(nonce, body, head, dest)
            else:  # an older cryptography: one copy more
                dest[:] = self._open.decrypt(nonce, bytes(body), bytes(head))
        except Exception:  # cryptography's InvalidTag
            self._tampered(f"record #{self._opened} failed its authentication tag")
        self._opened += 1
        self._rstart = end

    def _check(self, kind: int, data: memoryview, tag: Any) -> bool:
        """Whether ``tag`` is the MAC's tag of ``data``, the next record (of ``kind``)."""
        if self._c is not None and (len(data) <= _C_MAX or self._fast):
            return bool(self._c.check(self._opened, kind, data, tag))
        try:
            self._open.decrypt(_NONCE.pack(kind, self._opened), bytes(tag), data)
        except Exception:  # cryptography's InvalidTag
            return False
        return True

    def ended_inside_record(self) -> bool:
        """Whether the link failed because the stream ended inside a record (a peer that
        died in mid-send, or a cut connection) rather than on a record that failed its tag."""
        return self._eof and self._broken is not None and \
            "closed inside a record" in str(self._broken)

    def _tampered(self, why: str) -> None:
        self._broken = LinkTampered(
            f"rank {self.rank}: the link from rank {self.peer} was tampered with: "
            f"{why} (altered, replayed or reordered on the wire, or a peer with another "
            "key); aborting the job", rank=self.rank, peer=self.peer, operation="receive")
        raise self._broken

    @staticmethod
    def _nonce(counter: int) -> bytes:
        return _NONCE.pack(0, counter)
