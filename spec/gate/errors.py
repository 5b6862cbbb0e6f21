"""Every text a rank of the gate spec can fail with, each declared once, paired with ds4.

A text is a printf format that the spec fills the way ds4 fills it. Where ds4's ``ds4_tp.c``
(protocol v14, at ``DS4_COMMIT``) prints an error for the failure, the format is ds4's own,
with its ``ds4-tp: `` prefix and trailing newline stripped, and each declaration names the
function and the line that print it. Where ds4 fails without a word (``SILENT``), or does not
fail at all because the spec checks a rule ds4 lacks (``SAFETY_RULE``), the text is the
spec's own and says so by its prefix; the declaration then names the ds4 line that handles
the case. ``steps/`` builds every failure from a declaration here (tests/spec/test_ds4_texts.py
holds it to that), so a new error text cannot be typed in place.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from verbspec.spec.gate.state import (
    ARM_BAR_READ,
    BATCH_HDR_READ,
    BIG_BAR_READ,
    BIG_HDR_READ,
    BIG_LAYER,
    BIG_XFER,
    BLOCK_BAR_READ,
    BLOCK_END,
    BLOCK_HDR_READ,
    BLOCK_WAIT,
    DRAIN_WAIT,
    WAIT,
)

DS4_REPOSITORY = "zzyu17/ds4"
DS4_COMMIT = "1c45969407571694539fb5bca5b54795d411a4a2"
DS4_SOURCE = "ds4_tp.c"
DS4_PREFIX = "ds4-tp: "         # ds4 starts every stderr line with it; stripped here

# Where a text comes from.
DS4 = "ds4"                     # ds4 prints this format
SILENT = "silent"               # ds4 fails here too, but prints nothing
SAFETY_RULE = "safety rule"     # the spec fails where ds4 does not fail
OWN_PREFIX = {SILENT: "verbspec silent failure: ", SAFETY_RULE: "verbspec safety rule: "}

# One printf conversion: flags, width, precision, length modifier, conversion letter.
_CONVERSION = re.compile(r"%([#0 +-]*)(\d*)(\.\d+)?(hh|h|ll|l|z|j|t)?([diuxXs%])")
_UNSIGNED = frozenset("uxX")

# strerror(errno) where ds4 prints it after the big-gate header read met a dead peer: the
# rank wrote its own header before reading, so the dead peer's socket held unread data and
# the kernel answered with a reset (ECONNRESET).
PEER_CLOSED_ERRNO = "Connection reset by peer"
# a data-socket read past its SO_RCVTIMEO (the gate timeout) fails with EAGAIN
READ_TIMEOUT_ERRNO = "Resource temporarily unavailable"


@dataclass(frozen=True)
class Message:
    """One text: its printf format, the names of the values its conversions print (in order;
    a name may recur, as ds4 passes one value twice), and where ds4 handles the case."""

    fmt: str
    fields: tuple[str, ...]
    ds4_function: str
    ds4_line: int               # line of DS4_SOURCE at DS4_COMMIT
    origin: str = DS4

    def __post_init__(self) -> None:
        if len(_conversions(self.fmt)) != len(self.fields):
            raise ValueError(f"{self.fmt!r}: {len(self.fields)} fields for "
                             f"{len(_conversions(self.fmt))} conversions")
        own = OWN_PREFIX.get(self.origin)
        if self.origin != DS4 and (own is None or not self.fmt.startswith(own)):
            raise ValueError(f"{self.fmt!r}: a text of origin {self.origin!r} starts with {own!r}")
        if self.origin == DS4 and self.fmt.startswith(tuple(OWN_PREFIX.values())):
            raise ValueError(f"{self.fmt!r}: ds4's text carries the spec's own prefix")

    def __call__(self, **values: int | str) -> str:
        """The text with each field filled, as printf fills the format."""
        if set(values) != set(self.fields):
            raise TypeError(f"{self.fmt!r} takes {sorted(set(self.fields))}, got "
                            f"{sorted(values)}")
        args = tuple(values[f] for f in self.fields)
        for (_, letter), name, value in zip(_conversions(self.fmt), self.fields, args,
                                            strict=True):
            if letter == "s" and not isinstance(value, str):
                raise TypeError(f"{self.fmt!r}: {name} is printed with %s, got {value!r}")
            if letter != "s" and not (isinstance(value, int) and not isinstance(value, bool)):
                raise TypeError(f"{self.fmt!r}: {name} is printed with %{letter}, got {value!r}")
            if letter in _UNSIGNED and value < 0:
                raise ValueError(f"{self.fmt!r}: {name} is unsigned, got {value}")
        return _python_format(self.fmt) % args

    @property
    def ds4_format(self) -> str | None:
        """ds4's format for this failure; None where the text is the spec's own."""
        return self.fmt if self.origin == DS4 else None

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        """Matches exactly the texts this format can produce."""
        return _pattern(self.fmt)


def _conversions(fmt: str) -> list[tuple[str, str]]:
    """(flags, letter) of each conversion that consumes a value."""
    return [(m[1], m[5]) for m in _CONVERSION.finditer(fmt) if m[5] != "%"]


def _python_format(fmt: str) -> str:
    """The printf format as Python's %-format: length modifiers dropped, %u and %i as %d."""
    def one(m: re.Match[str]) -> str:
        letter = "d" if m[5] in "iu" else m[5]
        return "%" + m[1] + m[2] + (m[3] or "") + letter
    return _CONVERSION.sub(one, fmt)


def _pattern(fmt: str) -> re.Pattern[str]:
    digits = {"d": r"-?\d+", "i": r"-?\d+", "u": r"\d+", "x": "[0-9a-f]+", "X": "[0-9A-F]+"}
    out, at = [], 0
    for m in _CONVERSION.finditer(fmt):
        out.append(re.escape(fmt[at:m.start()]))
        letter = m[5]
        if letter == "%":
            out.append("%")
        elif letter == "s":
            out.append(".*")
        else:
            out.append(("0[xX]" if "#" in m[1] and letter in "xX" else "") + digits[letter])
        at = m.end()
    out.append(re.escape(fmt[at:]))
    return re.compile("".join(out), re.DOTALL)


# ----------------------------------------------------------------- pieces of other texts
# ds4 prints a work completion's status through tp_wc_status_str: the number, not a name.
WC_STATUS = Message("wc status %d", ("status",), "tp_wc_status_str", 1274)

# ----------------------------------------------------------------- logs
# ds4's hello compares the model and the slot schedule but carries neither RECV_WINDOW nor
# MAX_MSG, which each build has as a constant: the spec's hello compares them too
HELLO_MISMATCH = Message("verbspec safety rule: tp hello: peer's %s %llu != %llu",
                         ("what", "peer", "ours"), "tp_hello_exchange", 1963, SAFETY_RULE)
CHUNKED_VECTORS = Message("rdma gate vectors ride as 2 chunked messages (%llu bytes > %u limit)",
                          ("vec_bytes", "max_msg"), "tp_rdma_register_and_exchange", 1249)

# ----------------------------------------------------------------- decode gate
GATE_ORDER = Message("gate order broke: layer %u gate %u vs seq %llu",
                     ("layer", "gate", "seq"), "tp_rdma_gate_exchange", 1529)
# ds4 checks only that (layer, gate) is seq's slot; a repeated or skipped seq goes through
GATE_SEQ_ORDER = Message("verbspec safety rule: gate seq %llu out of order after gate %llu",
                         ("seq", "last"), "tp_rdma_gate_exchange", 1528, SAFETY_RULE)
# the arming barrier's failure ends the gate (ok = 0) with no message of its own
WINDOW_BARRIER_MISMATCH = Message(
    "verbspec silent failure: rdma window barrier read byte 0x%02x, expected 0x%02x",
    ("got", "want"), "tp_rdma_window_barrier", 1720, SILENT)
WINDOW_BARRIER_CLOSED = Message(
    "verbspec silent failure: peer closed the data socket during the rdma window barrier",
    (), "tp_rdma_window_barrier", 1719, SILENT)
WINDOW_BARRIER_TIMEOUT = Message(
    "verbspec silent failure: the rdma window barrier read timed out",
    (), "tp_rdma_window_barrier", 1719, SILENT)
GATE_COMPLETION = Message("rdma completion error: %s (wr_id %llu)", ("status", "wr_id"),
                          "tp_rdma_drain_cq", 1316)
GATE_PEER = Message("peer disconnected during RDMA gate", (), "tp_rdma_gate_exchange", 1579)
GATE_TIMEOUT = Message("timeout waiting gate seq %llu (recv_done %llu)", ("seq", "recv_done"),
                       "tp_rdma_gate_exchange", 1586)

# ----------------------------------------------------------------- drain
DRAIN_COMPLETION = Message("rdma receive-window drain: %s", ("status",),
                           "tp_rdma_drain_decode_window", 1677)
DRAIN_PEER = Message("peer disconnected while draining RDMA receives", (),
                     "tp_rdma_drain_decode_window", 1692)
DRAIN_TIMEOUT = Message("timeout draining RDMA receive window (%u/%u)", ("recvs", "want"),
                        "tp_rdma_drain_decode_window", 1698)

# ----------------------------------------------------------------- big gate
BIG_HEADER_FAILED = Message(
    "big gate header exchange failed or peer closed (layer %u seq %llu): %s",
    ("layer", "seq", "reason"), "ds4_tp_big_gate_exchange", 2305)
BIG_DESYNC = Message("big gate desync: got l=%u tag=%x seq=%llu, want l=%u seq=%llu",
                     ("got_layer", "got_tag", "got_seq", "layer", "seq"),
                     "ds4_tp_big_gate_exchange", 2315)
# ds4's header carries no size: ranks that disagree on it go on to exchange windows
BIG_SIZE_MISMATCH = Message(
    "verbspec safety rule: big gate %llu of %llu chunks vs the peer's %llu chunks",
    ("big", "chunks", "peer_chunks"), "ds4_tp_big_gate_exchange", 2312, SAFETY_RULE)
# ds4 reads sizeof(header) bytes of whatever the peer wrote and parses them as a header
BIG_HEADER_MISFRAMED = Message("verbspec safety rule: big gate header read found %s",
                               ("item",), "ds4_tp_big_gate_exchange", 2303, SAFETY_RULE)
BIG_UNAVAILABLE = Message("big gate unavailable or decode window still active", (),
                          "tp_rdma_big_gate_exchange", 1734)
BIG_BARRIER = Message("big gate window barrier failed", (), "tp_rdma_big_gate_exchange", 1805)
BIG_COMPLETION = Message("big gate completion error: %s", ("status",),
                         "tp_rdma_big_gate_exchange", 1848)
# ds4 takes an untagged receive completion in a big-gate window as a decode arrival
BIG_UNTAGGED = Message(
    "verbspec safety rule: receive completion wr_id %llu without the BULK tag in a big gate "
    "window", ("wr_id",), "tp_rdma_big_gate_exchange", 1854, SAFETY_RULE)
BIG_INVALID = Message("duplicate or invalid big gate completion %llu", ("wr_id",),
                      "tp_rdma_big_gate_exchange", 1865)
BIG_LENGTH = Message("big gate chunk %llu received %u bytes, expected %u",
                     ("chunk", "got", "want"), "tp_rdma_big_gate_exchange", 1874)
BIG_PEER = Message("peer disconnected during big gate", (), "tp_rdma_big_gate_exchange", 1884)
BIG_TIMEOUT = Message("timeout in big gate window (%u/%u recvs, %u/%u sends, %u sent)",
                      ("recvs", "chunks", "sends", "chunks", "sent"),
                      "tp_rdma_big_gate_exchange", 1888)

# ----------------------------------------------------------------- verify block
# ds4 has no header before the block's drain; the spec's rendezvous and its checks are its own
BLOCK_HEADER_FAILED = Message("verbspec safety rule: verify-block header exchange failed: %s",
                              ("reason",), "ds4_tp_batch_block_begin", 2192, SAFETY_RULE)
BLOCK_HEADER_MISFRAMED = Message("verbspec safety rule: verify-block header read found %s",
                                 ("item",), "ds4_tp_batch_block_begin", 2192, SAFETY_RULE)
BLOCK_HEADER_MISMATCH = Message(
    "verbspec safety rule: verify block of %u layers x %u rows vs the peer's %u x %u",
    ("layers", "rows", "peer_layers", "peer_rows"), "ds4_tp_batch_block_begin", 2191,
    SAFETY_RULE)
# tp_rdma_block_post_layer returns 0 without a message when a layer needs more receives than
# the queue's depth
BLOCK_RECV_DEPTH = Message(
    "verbspec silent failure: verify-block layer %u needs %u receives, above the receive "
    "depth %u", ("layer", "wrs", "depth"), "tp_rdma_block_post_layer", 1361, SILENT)
BLOCK_SEND_DEPTH = Message(
    "verbspec silent failure: verify-block layer %u sends %u work requests, above %u (half "
    "the receive depth) or the send depth %u", ("layer", "wrs", "half", "sq_depth"),
    "tp_rdma_block_gate_exchange", 1415, SILENT)
BLOCK_EMPTY = Message("rdma verify-block receive of 0 bytes", (), "tp_rdma_drain_cq", 1324)
BLOCK_PEER = Message("peer disconnected during verify-block gate", (),
                     "tp_rdma_block_gate_exchange", 1455)
BLOCK_TIMEOUT = Message("timeout waiting verify-block gate layer %u (%llu/%llu rows)",
                        ("layer", "rows", "want"), "tp_rdma_block_gate_exchange", 1460)
BLOCK_END_TIMEOUT = Message("verify-block end: %llu/%llu rows received, %u sends pending",
                            ("rows", "want", "pending"), "ds4_tp_batch_block_end", 2224)

# ----------------------------------------------------------------- a batch gate outside a block
# (DS4_TP_DISABLE_VERIFY_WINDOW): ds4_tp_batch_gate_exchange's header, then a big-gate transfer
BATCH_DESYNC = Message(
    "batch gate desync: got l=%u rows=%u seq=%llu, want l=%u rows=%u seq=%llu",
    ("got_layer", "got_rows", "got_seq", "layer", "rows", "seq"), "ds4_tp_batch_gate_exchange",
    2257)
# tp_read_full of the peer's 16-byte header returns 0 without a word: the read timed out or the
# peer closed, or the peer wrote something else (a barrier byte) and nothing after it
BATCH_HEADER_FAILED = Message("verbspec silent failure: batch gate header read failed: %s",
                              ("reason",), "ds4_tp_batch_gate_exchange", 2253, SILENT)
BATCH_HEADER_MISFRAMED = Message("verbspec silent failure: batch gate header read found %s",
                                 ("item",), "ds4_tp_batch_gate_exchange", 2253, SILENT)

# ----------------------------------------------------------------- post and poll failures
# strerror(errno) where a post fails: a full queue (ENOMEM), as the providers report it
POST_ERRNO = "Cannot allocate memory"
# and where a poll fails (the providers return a negative count; ds4 prints errno)
POLL_ERRNO = "Input/output error"
POST_RECV = Message("rdma post_recv(seq %llu): %s", ("seq", "reason"), "tp_rdma_post_gate_recv",
                    1500)
POST_SEND = Message("rdma post_send: %s", ("reason",), "tp_rdma_gate_exchange", 1567)
# tp_rdma_drain_cq returns 0 on a failed poll; the gate (or verify-block wait) ends silently
CQ_POLL = Message("verbspec silent failure: ibv_poll_cq failed in a gate or verify-block wait",
                  (), "tp_rdma_drain_cq", 1313, SILENT)
DRAIN_POST_FAILED = Message("rdma receive-window drain post failed: %s", ("reason",),
                     "tp_rdma_drain_decode_window", 1656)
DRAIN_POLL = Message("verbspec silent failure: ibv_poll_cq failed in the receive-window drain",
                     (), "tp_rdma_drain_decode_window", 1671, SILENT)
BIG_POST_RECV = Message("big gate post_recv(%u of %u): %s", ("first", "chunks", "reason"),
                        "tp_rdma_big_gate_exchange", 1799)
BIG_POST_SEND = Message("big gate post_send(%u): %s", ("wrs", "reason"),
                        "tp_rdma_big_gate_exchange", 1834)
BIG_POLL = Message("big gate poll_cq failed at %llu/%llu bytes: %s",
                   ("offset", "bytes", "reason"), "tp_rdma_big_gate_exchange", 1842)
BLOCK_POST_RECV = Message("rdma verify-block post_recv(layer %u): %s", ("layer", "reason"),
                          "tp_rdma_block_post_layer", 1387)
BLOCK_POST_SEND = Message("rdma verify-block post_send(layer %u): %s", ("layer", "reason"),
                          "tp_rdma_block_gate_exchange", 1440)

# Every text a rank can fail with, by name: each Message above but the piece and the log.
_NOT_ERRORS = ("WC_STATUS", "CHUNKED_VECTORS")
ERRORS: dict[str, Message] = {
    name: value for name, value in globals().items()
    if isinstance(value, Message) and name not in _NOT_ERRORS}


def documented(text: str) -> Message | None:
    """The declared error text ``text`` is an instance of, if any."""
    return next((m for m in ERRORS.values() if m.pattern.fullmatch(text)), None)


# ----------------------------------------------------------------- the waits, by phase
@dataclass(frozen=True)
class Text:
    """A declared text as a wait prints it: each field takes the wait's value of the same name,
    or of the name ``names`` gives it (field -> value), or the value ``fixed`` gives it."""

    message: Message
    names: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, int | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = (set(self.names) | set(self.fixed)) - set(self.message.fields)
        if unknown or set(self.names) & set(self.fixed):
            raise ValueError(f"{self.message.fmt!r}: fields {sorted(unknown)} unknown, or "
                             f"both named and fixed")

    def value_names(self) -> frozenset[str]:
        """The names of the values the text reads of its wait."""
        return frozenset(self.names.get(f, f) for f in self.message.fields
                         if f not in self.fixed)

    def __call__(self, values: Mapping[str, int | str]) -> str:
        return self.message(**{f: self.fixed[f] if f in self.fixed else values[self.names.get(f, f)]
                               for f in dict.fromkeys(self.message.fields)})


@dataclass(frozen=True)
class Wait:
    """How a wait (a CQ poll, or a read of the data socket) ends in one phase: the text of a
    timeout; of a dead peer (None where the wait never looks); of an error completion (a CQ
    poll's only, its values ``status`` and ``wr_id``)."""

    timeout: Text
    peer_gone: Text | None
    completion: Text | None = None


# Every phase a rank waits in, and the texts its wait ends with. A CQ poll's counts are ds4's at
# that point; a header read that fails prints strerror: EAGAIN past the socket's timeout, a reset
# from a dead peer. A decode gate and the verify block's waits poll through tp_rdma_drain_cq.
WAITS: dict[str, Wait] = {
    WAIT: Wait(
        timeout=Text(GATE_TIMEOUT),
        peer_gone=Text(GATE_PEER),
        completion=Text(GATE_COMPLETION)),
    DRAIN_WAIT: Wait(
        timeout=Text(DRAIN_TIMEOUT, {"recvs": "drain_recvs", "want": "drain_wrs"}),
        peer_gone=Text(DRAIN_PEER),
        completion=Text(DRAIN_COMPLETION)),
    BIG_XFER: Wait(
        timeout=Text(BIG_TIMEOUT, {"recvs": "big_received", "chunks": "big_win",
                                   "sends": "big_send_done", "sent": "big_sent"}),
        peer_gone=Text(BIG_PEER),
        completion=Text(BIG_COMPLETION)),
    BLOCK_WAIT: Wait(
        timeout=Text(BLOCK_TIMEOUT, {"layer": "block_layer", "rows": "block_recv_done",
                                     "want": "rows_due"}),
        peer_gone=Text(BLOCK_PEER),
        completion=Text(GATE_COMPLETION)),
    # ds4_tp_batch_block_end never checks the peer
    BLOCK_END: Wait(
        timeout=Text(BLOCK_END_TIMEOUT, {"rows": "block_recv_done", "want": "block_total",
                                         "pending": "send_outstanding"}),
        peer_gone=None,
        completion=Text(GATE_COMPLETION)),
    ARM_BAR_READ: Wait(
        timeout=Text(WINDOW_BARRIER_TIMEOUT),
        peer_gone=Text(WINDOW_BARRIER_CLOSED)),
    BIG_HDR_READ: Wait(
        timeout=Text(BIG_HEADER_FAILED, {"seq": "big_no"},
                     {"layer": BIG_LAYER, "reason": READ_TIMEOUT_ERRNO}),
        peer_gone=Text(BIG_HEADER_FAILED, {"seq": "big_no"},
                       {"layer": BIG_LAYER, "reason": PEER_CLOSED_ERRNO})),
    BIG_BAR_READ: Wait(
        timeout=Text(BIG_BARRIER),
        peer_gone=Text(BIG_BARRIER)),
    BLOCK_HDR_READ: Wait(
        timeout=Text(BLOCK_HEADER_FAILED, fixed={"reason": READ_TIMEOUT_ERRNO}),
        peer_gone=Text(BLOCK_HEADER_FAILED, fixed={"reason": PEER_CLOSED_ERRNO})),
    BATCH_HDR_READ: Wait(
        timeout=Text(BATCH_HEADER_FAILED, fixed={"reason": READ_TIMEOUT_ERRNO}),
        peer_gone=Text(BATCH_HEADER_FAILED, fixed={"reason": PEER_CLOSED_ERRNO})),
    BLOCK_BAR_READ: Wait(
        timeout=Text(WINDOW_BARRIER_TIMEOUT),
        peer_gone=Text(WINDOW_BARRIER_CLOSED)),
}
