"""The abstraction function: a state of the executable spec as the model's values (alpha),
and what that makes checkable: whether each step of a spec run is a step of the model, and
the shortest spec run breaking an invariant, with that check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cache
from typing import Any

import z3

from verbspec.proofs.gate.moves import move
from verbspec.proofs.gate.parameters import params_of
from verbspec.proofs.gate.terms import fresh_choice, fresh_params, fresh_state
from verbspec.proofs.gate.vocabulary import (
    CALL_BIG_STEP,
    PHASE_CODE,
    REAP_STEP,
    TCP_BYTE,
    TCP_HEADER,
    TCP_NONE,
    Choice,
    Choices,
    Ghost,
    Rank,
    Script,
    State,
)
from verbspec.spec.fabric import ST_OK
from verbspec.spec.gate import state as gs
from verbspec.spec.gate.params import GateConfig
from verbspec.spec.gate.state import GateState
from verbspec.spec.gate.steps import poll_batch
from verbspec.spec.lts import Trace


def _chunk_index(cfg: GateConfig, seq: int, chunk: int) -> int:
    return cfg.chunks * (seq - 1) + chunk + 1


def _tcp_item(item: Any) -> tuple[int, int, int, int]:
    """(kind, value, chunks, depth) of an unread TCP item (None: an empty slot)."""
    if item is None:
        return TCP_NONE, 0, 0, 0
    if item.kind == "byte":
        return TCP_BYTE, item.value, 0, 0
    return TCP_HEADER, item.value, item.chunks, item.depth


ERROR, WARM = ("error", ""), ("warm", "")     # completion kinds without a direction


def _cqe_kind(e: Any) -> tuple[str, str]:
    """Which of the model's CQ counts a completion belongs to: (payload kind, direction)."""
    if e.status != ST_OK:
        return ERROR
    kind = e.payload.kind
    if kind == "warm":
        return WARM
    return (kind, "send" if e.opcode == "send" else "recv")


def alpha(cfg: GateConfig, st: GateState) -> State:
    """The abstract values of a concrete state over UC without wire loss (defined up to and
    including the first state an invariant rejects)."""
    c = cfg.chunks
    f = st.fabric
    script = st.script
    ranks = []
    for r, rk in enumerate(st.ranks):
        qp = f.qps[r]
        is_armed = rk.window_active or rk.phase in (gs.ARM_BAR_SEND, gs.ARM_BAR_READ)
        gate_rq = [w for w in qp.rq if w.buf == "in"]
        stage_rq = [w for w in qp.rq if w.buf == "stage"]
        if gate_rq:
            w = gate_rq[0].want
            landed = _chunk_index(cfg, w.seq, w.chunk) - 1
        else:
            armed_ever = is_armed or rk.last_gate_seq != 0
            landed = c * (rk.last_gate_seq + cfg.window) if armed_ever else 0
        sq_kinds = [w.payload.kind for w in qp.sq]
        wire_kinds = [m.payload.kind for m in f.wire[r]]
        cq_kinds = [_cqe_kind(e) for e in qp.cq]
        big_flight = [m.payload for m in f.wire[r] if m.payload.kind == "big"] + [
            w.payload for w in qp.sq if w.payload.kind == "big"]
        partial = [h.seq for h in rk.held if h.buf == "in" and len(h.chunks) < c]
        tcp = f.tcp[r]
        if len(tcp) > 2:
            raise ValueError(f"rank {r} has {len(tcp)} TCP items unread, outside the model")
        t1, t2 = (_tcp_item(tcp[i] if i < len(tcp) else None) for i in (0, 1))
        op = rk.op
        ranks.append(Rank(
            phase=PHASE_CODE[rk.phase], seq=rk.seq, last_gate_seq=rk.last_gate_seq,
            recv_done=rk.recv_done, window_active=rk.window_active,
            send_outstanding=rk.send_outstanding, gates_sent=rk.sent_seq,
            gate_sends_queued=sq_kinds.count("gate"),
            gate_chunks_on_wire=wire_kinds.count("gate"),
            gate_send_cqes=cq_kinds.count(("gate", "send")),
            gate_recv_cqes=cq_kinds.count(("gate", "recv")),
            gate_recvs_posted=len(gate_rq), recv_stream_head=landed, arrived=rk.arrived,
            cq_overflow=qp.cq_overflow, partial_gate=partial[0] if partial else 0,
            phase_at_death=PHASE_CODE[rk.died_in] if rk.died_in else 0,
            warm_cqes=cq_kinds.count(WARM), error_cqes=cq_kinds.count(ERROR),
            strays_used=len(rk.strays), error_injected="cqe" in rk.faults_used,
            ops_done=op, big_chunks=rk.big_chunks,
            last_op_big=op >= 1 and script[op - 1] != 0,
            dummy_sends_queued=sq_kinds.count("dummy"),
            dummies_on_wire=wire_kinds.count("dummy"),
            dummy_send_cqes=cq_kinds.count(("dummy", "send")),
            dummy_recv_cqes=cq_kinds.count(("dummy", "recv")),
            drain_recvs=rk.drain_recvs, drain_sends=rk.drain_sends,
            big_no=rk.big_no, hdr_ok=rk.hdr_ok, big_depth=rk.big_depth, big_base=rk.big_base,
            big_win=rk.big_win, big_posted=rk.big_posted, big_sent=rk.big_sent,
            big_send_done=rk.big_send_done, big_sends_flying=rk.big_sent - rk.big_send_done,
            big_recvd=len(rk.big_recvd),
            big_landed=rk.big_posted - len(stage_rq), barrier_tag=rk.barrier_tag,
            big_sends_queued=sq_kinds.count("big"), big_chunks_on_wire=wire_kinds.count("big"),
            big_send_cqes=cq_kinds.count(("big", "send")),
            big_recv_cqes=cq_kinds.count(("big", "recv")),
            staging_recvs_posted=len(stage_rq),
            next_big_no=big_flight[0].chunk if big_flight else 0,
            next_big_chunk=big_flight[0].seq if big_flight else 0,
            tcp_unread=len(tcp),
            tcp1_kind=t1[0], tcp1_value=t1[1], tcp1_chunks=t1[2], tcp1_depth=t1[3],
            tcp2_kind=t2[0], tcp2_value=t2[1], tcp2_chunks=t2[2], tcp2_depth=t2[3]))
    g = st.ghost
    ghost = Ghost(dropped=bool(g.drops), misaligned=bool(g.misaligned),
                  clobbered=bool(g.clobbered), stale=bool(g.stale), out_of_order=bool(g.order),
                  long_chain=bool(g.long_chains), faulted=g.faulted, unmodelled=False)
    return State((ranks[0], ranks[1]), ghost,
                 Script(length=len(script), last=script[-1] if script else 0,
                        before_last=script[-2] if len(script) > 1 else 0))


def zero_values(cls: type) -> Any:
    """A record of values, every one 0."""
    return cls(**{f.name: 0 for f in fields(cls)})


@cache
def no_choices() -> Choices:
    """Choice values, every one 0 (a move that chooses nothing); one frozen value."""
    return Choices((zero_values(Choice), zero_values(Choice)))


def reap_choice(cfg: GateConfig, st: GateState, r: int) -> Choice:
    """How the spec's reap splits the completions of one poll, and how many of each kind
    precede the first error among them."""
    got = [_cqe_kind(e) for e in st.fabric.qps[r].cq[:poll_batch(cfg, st.ranks[r].phase)]]
    before = got[:got.index(ERROR)] if ERROR in got else got
    return Choice(gate_sends=got.count(("gate", "send")),
                  gate_recvs=got.count(("gate", "recv")),
                  dummy_sends=got.count(("dummy", "send")),
                  dummy_recvs=got.count(("dummy", "recv")),
                  big_sends=got.count(("big", "send")), big_recvs=got.count(("big", "recv")),
                  warm=got.count(WARM), errors=got.count(ERROR),
                  gate_sends_before_error=before.count(("gate", "send")),
                  gate_recvs_before_error=before.count(("gate", "recv")),
                  dummy_sends_before_error=before.count(("dummy", "send")),
                  dummy_recvs_before_error=before.count(("dummy", "recv")),
                  big_sends_before_error=before.count(("big", "send")),
                  big_recvs_before_error=before.count(("big", "recv")), big_size=0)


def step_choices(cfg: GateConfig, st: GateState, name: str, args: Sequence[Any]) -> Choices:
    """The model's choices for a spec step: reap's split, call_big's size."""
    choices, r = no_choices(), args[0]
    if name == REAP_STEP:
        choices = choices.with_rank(r, reap_choice(cfg, st, r))
    if name == CALL_BIG_STEP:
        choices = choices.with_rank(r, replace(choices.rank[r], big_size=args[1]))
    return choices


def value_terms(values: Any, like: Any) -> list[tuple[z3.ExprRef, z3.ExprRef]]:
    """(variable, value) pairs of a record of values and the same record of variables
    (State, Choices or Params)."""
    pairs = []
    for (_, v), (_, sym) in zip(values.items(), like.items(), strict=True):
        val = z3.BoolVal(bool(v)) if z3.is_bool(sym) else z3.BitVecVal(v, sym.size())
        pairs.append((sym, val))
    return pairs


def evaluate(term: z3.ExprRef, pairs: list[tuple[z3.ExprRef, z3.ExprRef]]) -> bool:
    """Truth of a term once every variable is replaced by a value."""
    val = z3.simplify(z3.substitute(term, *pairs))
    if z3.is_true(val):
        return True
    if z3.is_false(val):
        return False
    solver = z3.Solver()
    solver.add(val)
    return solver.check() == z3.sat


def model_admits(cfg: GateConfig, states: list[GateState],
                 moves: list[tuple[str, tuple[Any, ...]]], variants: Sequence[str] = ()) -> bool:
    """Each step of a spec run (action name and arguments), seen through alpha, is a step of
    the model, with the choices the spec made in it (reap's split, call_big's size)."""
    prm = fresh_params()
    ppairs = value_terms(params_of(cfg, variants), prm)
    s, t, ch = fresh_state("s"), fresh_state("t"), fresh_choice("s")
    for pre, post, (name, args) in zip(states[:-1], states[1:], moves, strict=True):
        pairs = (value_terms(alpha(cfg, pre), s) + value_terms(alpha(cfg, post), t)
                 + ppairs + value_terms(step_choices(cfg, pre, name, args), ch))
        if not evaluate(move(name, args[0], s, t, prm, ch), pairs):
            return False
    return True


@dataclass(frozen=True)
class SpecRun:
    """A shortest run of the executable spec that breaks an invariant."""

    trace: Trace
    admitted: bool      # the model admits every step of it

    @property
    def moves(self) -> int:
        return len(self.trace) - 1


def spec_counterexample(values: Mapping[str, Any], prop: str, variants: Sequence[str] = (),
                        depth: int = 40, max_states: int = 300_000,
                        max_faults: int | None = None) -> SpecRun | None:
    """Shortest run of the executable spec breaking ``prop`` (breadth-first; with
    faults=1, among runs of at most ``max_faults`` fault actions, if given), and whether the
    model admits every step of it."""
    from verbspec.proofs.search import bounded_search
    from verbspec.spec.gate.system import build

    system = build(values, variants)
    res = bounded_search(system, depth=depth, target=prop, faults=bool(system.params.faults),
                         max_faults=max_faults if system.params.faults else None,
                         max_states=max_states, variants=variants)
    if res.trace is None:
        return None
    steps = res.trace.steps
    moves = [(st.action, tuple(st.args.values())) for st in steps[1:]]
    return SpecRun(res.trace, model_admits(system.params, [st.state for st in steps], moves,
                                           variants))
