"""What the gate protocol puts on the fabric: its wr_id tag bits, the ghost identity of each
message's bytes, and the items it writes on the TCP side channel."""

from __future__ import annotations

from dataclasses import dataclass

# wr_id tag bits: gate receives and sends carry bare sequence numbers
TAG_BULK = 1 << 63      # drain dummies and big-gate chunks: BULK | index
TAG_WARM = 1 << 62      # warm-up exchanges at setup
TAG_BLOCK = 1 << 61     # verify-block rows: BLOCK | (layer*rows + row + 1) received, BLOCK | 1 sent
TAG_MASK = TAG_BULK | TAG_WARM

@dataclass(frozen=True)
class Payload:
    """Ghost identity of the bytes a message carries, so checkers can see what landed where.

    kind: "gate" (seq, chunk), "dummy" (seq = the sender's last gate, chunk = index),
    "big" (seq = chunk index in the big gate, chunk = big-gate number), "block" (seq = row
    of the block, layer * rows + row; chunk), "warm".
    """

    kind: str
    origin: int
    seq: int
    chunk: int


@dataclass(frozen=True)
class Hello:
    """The gate protocol's share of the ranks' hello: the values both ranks must agree on that
    ds4 builds in as constants (and so never exchanges)."""

    window: int         # gates of receive lookahead (ds4's RECV_WINDOW)
    max_msg: int        # the message cap a vector is chunked by (ds4's MAX_MSG)


@dataclass(frozen=True)
class TcpItem:
    """One write on the TCP side channel: a barrier byte, a big-gate header, a verify-block
    header or a batch gate's header."""

    kind: str           # "byte" | "header" | "block" | "batch"
    value: int          # the byte, the header's big-gate number, the block's layers, or the
                        # batch gate's layer
    chunks: int = 0     # header: chunks of the big gate; block and batch: rows per layer
    depth: int = 0      # header: the sender's granted receive depth; batch: its seq

    def describe(self) -> str:
        """The item as a header read that did not expect it names it."""
        if self.kind == "byte":
            return f"byte 0x{self.value:02x}"
        if self.kind == "block":
            return f"verify-block header ({self.value} layers x {self.chunks} rows)"
        if self.kind == "batch":
            return f"batch header (layer {self.value}, {self.chunks} rows, seq {self.depth})"
        return f"header big {self.value} ({self.chunks} chunks)"
