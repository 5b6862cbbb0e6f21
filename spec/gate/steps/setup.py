"""The rank's setup, the application's calls, and the arming of the decode window."""

from __future__ import annotations

from collections.abc import Iterator

from verbspec.spec import fabric as fb
from verbspec.spec.actions import action
from verbspec.spec.fabric import RecvWR
from verbspec.spec.gate import errors
from verbspec.spec.gate.state import (
    ARM_BAR_READ,
    ARM_BAR_SEND,
    ARM_POST,
    BIG_HDR_SEND,
    DRAIN_POST,
    IDLE,
    INIT,
    SEND,
    WINDOW_BARRIER,
    GateState,
)
from verbspec.spec.gate.steps.common import StepsBase, first_byte, hello_mismatch
from verbspec.spec.gate.variants import (
    DRAIN_WITHOUT_RENDEZVOUS,
    NO_BARRIER,
    NO_SEQ_CHECK,
    UNEXCHANGED_CONFIG,
)
from verbspec.spec.gate.wire import TcpItem
from verbspec.spec.values import evolve


class SetupSteps(StepsBase):
    """Setup, the application's calls, and arming the decode window."""

    # ------------------------------------------------------------------ setup
    def en_setup(self, s: GateState) -> Iterator[tuple]:
        return ((r,) for r in (0, 1) if s.ranks[r].phase == INIT)

    @action("rank", guard=en_setup)
    def do_setup(self, s: GateState, r: int):
        """The rank's setup, its hello included: the spec's hello compares the receive window
        and the message cap, which ds4's does not carry (unexchanged-config)."""
        c = self.cfgs[r]
        differs = hello_mismatch(c.hello, self.cfgs[1 - r].hello)
        if differs and not UNEXCHANGED_CONFIG.on(self.v):
            # ranks built apart are a fault of their environment, refused with a documented text
            what, peer, ours = differs
            return self._fail(self._faulted(s), r,
                              errors.HELLO_MISMATCH(what=what, peer=peer, ours=ours))
        s = self._put(s, r, phase=IDLE)
        log = ((errors.CHUNKED_VECTORS(vec_bytes=c.vec_bytes, max_msg=c.max_msg),)
               if self.rank_chunks[r] == 2 else ())
        return s, self._obs(s, r, log=log)

    # ------------------------------------------------------------------ application calls
    def gate_call_args(self, s: GateState, r: int) -> tuple[int, int, int]:
        seq = s.ranks[r].last_gate_seq + 1
        slot = self.cfg.slot(seq)
        return slot // 2, slot % 2, seq

    def en_call_gate(self, s: GateState):
        for r in (0, 1):
            if s.ranks[r].phase == IDLE and 0 in self.ops_allowed(s, r):
                yield (r, *self.gate_call_args(s, r))

    @action("rank", "layer", "gate", "seq", guard=en_call_gate)
    def do_call_gate(self, s: GateState, r: int, layer: int, gate: int, seq: int):
        """gate(layer, gate, seq): the checks come before any state is touched."""
        rk = s.ranks[r]
        if layer * 2 + gate != self.cfg.slot(seq):
            return self._fail(s, r, errors.GATE_ORDER(layer=layer, gate=gate, seq=seq))
        if seq != rk.last_gate_seq + 1 and not NO_SEQ_CHECK.on(self.v):
            return self._fail(s, r, errors.GATE_SEQ_ORDER(seq=seq, last=rk.last_gate_seq))
        if rk.op == len(s.script):
            s = evolve(s, script=s.script + (0,))
        # the application has written its vector for `seq` into out-slot(seq)
        slot = self.cfg.slot(seq)
        busy = [w for w in s.fabric.qps[r].sq if w.buf == "out" and w.slot == slot
                and w.payload.seq != seq]
        if busy:
            s = self._ghost(s, clobbered=f"rank {r} rewrote out-slot {slot} for gate {seq} while "
                                         f"the send of gate {busy[0].payload.seq} still reads it")
        s = self._put(s, r, seq=seq, phase=SEND if rk.window_active else ARM_POST)
        return s, self._obs(s, r)

    def en_call_big(self, s: GateState):
        for r in (0, 1):
            if s.ranks[r].phase == IDLE:
                for n in self.ops_allowed(s, r):
                    if n > 0:
                        yield (r, n)

    @action("rank", "chunks", guard=en_call_big)
    def do_call_big(self, s: GateState, r: int, chunks: int):
        rk = s.ranks[r]
        if rk.op == len(s.script):
            s = evolve(s, script=s.script + (chunks,))
        # ds4 drains only after the header exchange, which is the rendezvous that brings both
        # ranks to the switch together; the variant drains first.
        early = DRAIN_WITHOUT_RENDEZVOUS.on(self.v) and rk.window_active
        # the big-gate barrier byte counts this call's windows from 1, as ds4's does
        s = self._put(s, r, big_no=rk.big_no + 1, big_chunks=chunks, big_base=0, hdr_ok=False,
                      barrier_tag=0, phase=DRAIN_POST if early else BIG_HDR_SEND)
        return s, self._obs(s, r)

    # ------------------------------------------------------------------ arming
    def en_arm_post(self, s):
        return self._phase_is(s, ARM_POST)

    @action("rank", guard=en_arm_post)
    def do_arm_post(self, s: GateState, r: int):
        """Post the window's receive chains: gates seq .. seq+window-1."""
        rk = s.ranks[r]
        wrs: tuple[RecvWR, ...] = ()
        for q in range(rk.seq, rk.seq + self.cfgs[r].window):
            wrs += self.gate_recv_chain(r, q)
        s = evolve(s, fabric=fb.post_recv(s.fabric, r, wrs))
        s = self._chain_check(s, r, self.rank_chunks[r], "receive")
        if NO_BARRIER.on(self.v):
            s = self._put(s, r, window_active=True, phase=SEND)
        else:
            s = self._put(s, r, phase=ARM_BAR_SEND)
        return s, self._obs(s, r, recvs=tuple(self._wr_view(r, w) for w in wrs))

    def en_barrier_write(self, s):
        return self._phase_is(s, ARM_BAR_SEND)

    @action("rank", guard=en_barrier_write)
    def do_barrier_write(self, s: GateState, r: int):
        item = TcpItem("byte", WINDOW_BARRIER)
        return self._write(s, r, item, phase=ARM_BAR_READ)

    def en_barrier_read(self, s):
        return self._tcp_ready(s, ARM_BAR_READ)

    @action("rank", guard=en_barrier_read)
    def do_barrier_read(self, s: GateState, r: int):
        item, f = fb.tcp_read(s.fabric, r)
        s = evolve(s, fabric=f)
        if item.kind != "byte" or item.value != WINDOW_BARRIER:
            # the posted receives stay posted; the window stays inactive
            return self._fail(s, r, errors.WINDOW_BARRIER_MISMATCH(
                got=first_byte(item), want=WINDOW_BARRIER), tcp_in=(item,))
        s = self._put(s, r, window_active=True, phase=SEND)
        return s, self._obs(s, r, tcp_in=(item,))
