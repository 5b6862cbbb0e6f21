"""Faults: crashes, error and stray completions, lost messages, bad calls, timeouts, a dead
peer, and failing posts and polls."""

from __future__ import annotations

from verbspec.spec import fabric as fb
from verbspec.spec.actions import action
from verbspec.spec.fabric import RecvWR
from verbspec.spec.gate import errors
from verbspec.spec.gate.state import (
    ARM_POST,
    BIG_POST,
    BIG_XFER,
    BLOCK_END,
    BLOCK_POST,
    BLOCK_SEND,
    CRASHED,
    DRAIN_POST,
    DRAIN_WAIT,
    IDLE,
    INIT,
    REAP_PHASES,
    SEND,
    TCP_READ_PHASES,
    WAIT,
    GateState,
    Rank,
)
from verbspec.spec.gate.steps.common import POST_FAILURE, StepsBase
from verbspec.spec.gate.variants import (
    STRAY_SEND_COMPLETION,
    STRAY_WARM_RECEIVE,
    UNTAGGED_IN_BIG_WINDOW,
)
from verbspec.spec.gate.wire import TAG_WARM, Payload
from verbspec.spec.values import evolve


class FaultSteps(StepsBase):
    """The environment's faults and the waits they end."""

    # ------------------------------------------------------------------ faults
    def en_crash(self, s: GateState):
        if self.cfg.faults:
            for r in (0, 1):
                if s.ranks[r].alive and s.ranks[r].phase != INIT and not s.ghost.faulted:
                    yield (r,)

    @action("rank", guard=en_crash, fault=True)
    def do_crash(self, s: GateState, r: int):
        s = self._faulted(self._put(s, r, phase=CRASHED, error="crashed",
                                    died_in=s.ranks[r].phase))
        return s, self._obs(s, r)

    def en_error_completion(self, s: GateState):
        if self.cfg.faults:
            for r in (0, 1):
                rk = s.ranks[r]
                if rk.phase in REAP_PHASES and "cqe" not in rk.faults_used:
                    yield (r,)

    @action("rank", guard=en_error_completion, fault=True)
    def do_error_completion(self, s: GateState, r: int):
        qp = fb.push_cqe(s.fabric.qps[r], fb.CQE("send", 0, fb.ST_RETRY, 0,
                                                  Payload("warm", r, 0, 0)), self.cfg.cq_depth)
        s = evolve(s, fabric=fb.set_qp(s.fabric, r, qp))
        rk = s.ranks[r]
        s = self._faulted(self._put(s, r, faults_used=rk.faults_used | {"cqe"}))
        return s, self._obs(s, r)

    def en_stray_completion(self, s: GateState):
        """Warm-up leftovers: setup's warm-up exchange (wr_id 1<<62) completing late. Over UC
        up to ``warm_send_leftovers`` send completions (ds4 posts a send per attempt and stops
        polling at the first send completion it sees); over RC none (its warm-up reaps its
        one send). A receive completion only with ``warm_recv_leftover``: ds4's warm-up
        succeeds only after reaping its one warm receive."""
        c = self.cfg
        sends = (c.faults or STRAY_SEND_COMPLETION.on(self.v)) and c.qp_type == "uc"
        recvs = c.warm_recv_leftover and (c.faults or STRAY_WARM_RECEIVE.on(self.v)
                                          or UNTAGGED_IN_BIG_WINDOW.on(self.v))
        for r in (0, 1):
            rk = s.ranks[r]
            if rk.alive and rk.phase != INIT:
                if sends and rk.strays.count("send") < c.warm_send_leftovers:
                    yield (r, "send")
                if recvs and "recv" not in rk.strays:
                    yield (r, "recv")

    @action("rank", "kind", guard=en_stray_completion, fault=True)
    def do_stray_completion(self, s: GateState, r: int, kind: str):
        cqe = fb.CQE(kind, TAG_WARM, fb.ST_OK, 1, Payload("warm", r, 0, 0))
        qp = fb.push_cqe(s.fabric.qps[r], cqe, self.cfg.cq_depth)
        s = evolve(s, fabric=fb.set_qp(s.fabric, r, qp))
        s = self._put(s, r, strays=tuple(sorted(s.ranks[r].strays + (kind,))))
        return s, self._obs(s, r)

    def en_lose(self, s: GateState):
        if self.cfg.wire_loss:
            return ((r,) for r in (0, 1) if s.fabric.wire[r])
        return iter(())

    @action("src", guard=en_lose, fault=True)
    def do_lose(self, s: GateState, src: int):
        f = fb.lose(s.fabric, src, self.cfg.cq_depth)
        s = self._faulted(evolve(s, fabric=f))
        return s, self._obs(s, 1 - src)

    def en_bad_call(self, s: GateState):
        """Application misuse: a wrong layer, a repeated seq, a skipped seq."""
        if not self.cfg.faults:
            return
        for r in (0, 1):
            rk = s.ranks[r]
            if rk.phase == IDLE and 0 in self.ops_allowed(s, r):
                layer, gate, seq = self.gate_call_args(s, r)
                yield (r, layer + 1, gate, seq)
                if seq > 1:
                    yield (r, *self._layer_gate(seq - 1), seq - 1)
                yield (r, *self._layer_gate(seq + 1), seq + 1)

    @action("rank", "layer", "gate", "seq", guard=en_bad_call, fault=True)
    def do_bad_call(self, s: GateState, r: int, layer: int, gate: int, seq: int):
        # a bad call is the environment misbehaving: the protocol must refuse it
        return self.do_call_gate(self._faulted(s), r, layer, gate, seq)

    def _layer_gate(self, seq: int) -> tuple[int, int]:
        slot = self.cfg.slot(seq)
        return slot // 2, slot % 2

    def en_timeout(self, s: GateState):
        """Spurious timeouts only when faults are explored; otherwise only a stalled wait. A
        wait is a CQ poll, or a data-socket read with nothing from the peer to read (ds4 sets
        the socket's receive timeout to the gate timeout)."""
        waiting = [r for r in (0, 1) if s.ranks[r].phase in REAP_PHASES
                   or (s.ranks[r].phase in TCP_READ_PHASES and not s.fabric.tcp[1 - r])]
        if waiting and (self.cfg.faults or not self.can_progress(s)):
            yield from ((r,) for r in waiting)

    def wait_values(self, r: int, rk: Rank) -> dict[str, int]:
        """What the texts of rank ``r``'s waits print (errors.WAITS names them): its counts,
        and what its wait waits for."""
        return {"seq": rk.seq, "recv_done": rk.recv_done, "drain_recvs": rk.drain_recvs,
                "drain_wrs": self.drain_wrs(r), "big_no": rk.big_no,
                "big_received": len(rk.big_recvd), "big_win": rk.big_win,
                "big_send_done": rk.big_send_done, "big_sent": rk.big_sent,
                "block_layer": rk.block_layer, "block_recv_done": rk.block_recv_done,
                "rows_due": (rk.block_layer + 1) * self.cfgs[r].block_rows,
                "block_total": self.block_total(r), "send_outstanding": rk.send_outstanding}

    def timed_out(self, r: int, rk: Rank) -> str:
        """The text of a wait that timed out, with ds4's counts at that point."""
        return errors.WAITS[rk.phase].timeout(self.wait_values(r, rk))

    @action("rank", guard=en_timeout, fault=True)
    def do_timeout(self, s: GateState, r: int):
        s = self._faulted(s)
        return self._fail(s, r, self.timed_out(r, s.ranks[r]))

    # ------------------------------------------------------------------ post and poll failures
    def post_calls(self, s: GateState, r: int) -> tuple[int, ...]:
        """Where the rank's next step may fail posting, as the number of work requests it has
        posted when its failing call is refused: an arming posts a chain per gate (the first
        gate's or the last gate's may fail; the gates before stay posted), a verify-block gate
        its next layer's receives, then its sends; every other posting step one chain, which
        fails whole (at its first WR, as a full queue refuses it)."""
        c, rk = self.cfgs[r], s.ranks[r]
        ph = rk.phase
        if ph == ARM_POST:
            return tuple(sorted({0, (c.window - 1) * self.rank_chunks[r]}))
        if ph in (SEND, DRAIN_POST, BIG_POST) or (ph == WAIT and rk.recv_done >= rk.seq):
            return (0,)
        if ph == BIG_XFER:
            return (0,) if self._send_room(rk) > 0 else ()
        if ph == BLOCK_POST:
            return (0,) if c.block_wrs <= self.rq_grant[r] else ()
        if ph == BLOCK_SEND:
            ahead = c.block_wrs if rk.block_layer + 1 < c.block_layers else 0
            if ahead and c.block_wrs > self.rq_grant[r]:
                return ()       # ds4 fails silently before it posts
            sends = c.block_wrs <= self.rq_grant[r] // 2 and c.block_wrs <= c.sq_depth
            return ((0,) if ahead else ()) + ((ahead,) if sends else ())
        return ()

    def en_post_fail(self, s: GateState):
        if self.cfg.faults and self.cfg.post_failures:
            for r in (0, 1):
                for posted in self.post_calls(s, r):
                    yield (r, posted)

    @action("rank", "posted", guard=en_post_fail, fault=True, group=POST_FAILURE)
    def do_post_fail(self, s: GateState, r: int, posted: int):
        """ibv_post_recv or ibv_post_send refuses the step's post call once ``posted`` work
        requests of the step are up: they stay posted, and the rank fails with ds4's text for
        that call (nothing else of the step happens)."""
        c, rk = self.cfgs[r], s.ranks[r]
        s = self._faulted(s)
        reason = errors.POST_ERRNO
        if rk.phase == ARM_POST:
            wrs: tuple[RecvWR, ...] = ()
            for q in range(rk.seq, rk.seq + posted // self.rank_chunks[r]):
                wrs += self.gate_recv_chain(r, q)
            s = evolve(s, fabric=fb.post_recv(s.fabric, r, wrs))
            return self._fail(s, r, errors.POST_RECV(seq=rk.seq + posted // self.rank_chunks[r],
                                                     reason=reason),
                              recvs=tuple(self._wr_view(r, w) for w in wrs))
        if rk.phase == SEND:
            return self._fail(s, r, errors.POST_SEND(reason=reason))
        if rk.phase == WAIT:
            return self._fail(s, r, errors.POST_RECV(seq=rk.seq + c.window, reason=reason))
        if rk.phase == DRAIN_POST:
            return self._fail(s, r, errors.DRAIN_POST_FAILED(reason=reason))
        if rk.phase == BIG_POST:
            return self._fail(s, r, errors.BIG_POST_RECV(first=rk.big_posted, chunks=rk.big_win,
                                                         reason=reason))
        if rk.phase == BIG_XFER:
            return self._fail(s, r, errors.BIG_POST_SEND(wrs=self._send_room(rk), reason=reason))
        if rk.phase == BLOCK_POST:
            return self._fail(s, r, errors.BLOCK_POST_RECV(layer=0, reason=reason))
        if posted < (c.block_wrs if rk.block_layer + 1 < c.block_layers else 0):
            return self._fail(s, r, errors.BLOCK_POST_RECV(layer=rk.block_layer + 1,
                                                           reason=reason))
        recvs = ()
        if rk.block_layer + 1 < c.block_layers:
            s, recvs = self._post_block_layer(s, r, rk.block_layer + 1)
        return self._fail(s, r, errors.BLOCK_POST_SEND(layer=rk.block_layer, reason=reason),
                          recvs=tuple(self._wr_view(r, w) for w in recvs))

    def en_poll_fail(self, s: GateState):
        if self.cfg.faults and self.cfg.post_failures:
            yield from ((r,) for r in (0, 1) if s.ranks[r].phase in REAP_PHASES)

    @action("rank", guard=en_poll_fail, fault=True, group=POST_FAILURE)
    def do_poll_fail(self, s: GateState, r: int):
        """ibv_poll_cq returns an error: the wait ends, silently but in a big-gate window."""
        rk, c = s.ranks[r], self.cfgs[r]
        s = self._faulted(s)
        if rk.phase == DRAIN_WAIT:
            return self._fail(s, r, errors.DRAIN_POLL())
        if rk.phase == BIG_XFER:
            total = (rk.big_chunks - 1) * c.max_msg + self.big_lens(s, r)(rk.big_chunks - 1)
            return self._fail(s, r, errors.BIG_POLL(offset=rk.big_base * c.max_msg, bytes=total,
                                                    reason=errors.POLL_ERRNO))
        return self._fail(s, r, errors.CQ_POLL())

    def en_peer_gone(self, s: GateState):
        for r in (0, 1):
            rk = s.ranks[r]
            if s.ranks[1 - r].alive or rk.phase == BLOCK_END:
                continue        # ds4_tp_batch_block_end never checks the peer
            if rk.phase in REAP_PHASES or (rk.phase in TCP_READ_PHASES
                                           and not s.fabric.tcp[1 - r]):
                yield (r,)

    @action("rank", guard=en_peer_gone, fault=True)
    def do_peer_gone(self, s: GateState, r: int):
        """The peer's TCP socket closed: the liveness check (every 16384 polls) or a read sees
        it."""
        return self._fail(s, r, self.peer_gone_error(r, s.ranks[r]))

    def peer_gone_error(self, r: int, rk: Rank) -> str:
        """The text of a wait or read that found the peer gone, by the phase it ended."""
        if errors.WAITS[rk.phase].peer_gone is None:
            raise AssertionError(f"spec bug: peer_gone in phase {rk.phase}")
        return errors.WAITS[rk.phase].peer_gone(self.wait_values(r, rk))
