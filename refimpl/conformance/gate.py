"""The gate conformance harness: the spec's closed system is the world, and an implementation
of one rank is held to it, step by step, for both ranks at once.

Every spec action that belongs to a rank is delivered to that rank's implementation: an
application call (``call_gate``, ``call_big``, ``consume``, and the fault ``bad_call``), the
item a TCP read returned, the completions a poll returned (after checking that the
implementation asks for as many as the spec's poll takes), a timeout, a closed peer, a crash,
or, for a step the rank takes on its own, ``advance``. What the implementation emits (the work
requests it posts, with wr_id, region offset, length and signaled flag; its TCP writes; its
result and log) must equal the spec's ``Observation`` of that step, and after every step both
implementations' views must equal the spec's rank views. The fabric's own steps (transmit,
deliver, wire loss) and the faults that only touch a CQ (error and stray completions) reach an
implementation through what it later polls, exactly as the spec injects them.

An implementation fits ``GateImpl``; ``refimpl.engines.gate_engine.GateEngine`` is the reference
one, ``refimpl.bindings.native_gate.NativeGateEngine`` runs the C engine
(``native/gate/gate_engine.c``). The runs, sweeps and walks themselves are the protocols' common
lockstep core (``conformance.lockstep``).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

from verbspec.refimpl.conformance import lockstep

# re-exported for the trace tools and the C replay, which take them from the gate harness
from verbspec.refimpl.conformance.lockstep import CONFORMANCE as CONFORMANCE
from verbspec.refimpl.conformance.lockstep import (
    SHRINK_SECONDS,
    ConformanceReport,
    Harness,
    Planned,
    Reaction,
    Run,
    unoffered,
)
from verbspec.refimpl.conformance.lockstep import recorded as recorded
from verbspec.refimpl.conformance.random_runs import Swarm, conform_runs
from verbspec.refimpl.engines.gate_engine import (
    ADVANCE,
    DEAD,
    POLL,
    READ,
    Completion,
    Emitted,
    GateEngine,
)
from verbspec.spec import fabric as fb
from verbspec.spec.actions import name_of
from verbspec.spec.gate.params import GateConfig
from verbspec.spec.gate.state import (
    ARM_BAR_READ,
    BATCH_HDR_READ,
    BIG_BAR_READ,
    BIG_HDR_READ,
    BIG_XFER,
    BLOCK_BAR_READ,
    BLOCK_END,
    BLOCK_HDR_READ,
    BLOCK_WAIT,
    DRAIN_WAIT,
    WAIT,
    GateState,
    Observation,
    RankView,
)
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.system import GateSystem
from verbspec.spec.gate.wire import Hello, TcpItem
from verbspec.spec.lts import Action


class GateImpl(Protocol):
    """What an implementation of one gate rank offers the harness (the adapter)."""

    def setup(self, peer: Hello | None = None) -> Emitted: ...
    def call_gate(self, layer: int, gate: int, seq: int) -> Emitted: ...
    def call_big(self, chunks: int) -> Emitted: ...
    def call_block(self) -> Emitted: ...
    def consume(self) -> Emitted: ...
    def advance(self) -> Emitted: ...
    def tcp_read(self, item: TcpItem) -> Emitted: ...
    def poll_size(self) -> int: ...
    def completions(self, polled: tuple[Completion, ...]) -> Emitted: ...
    def timeout(self) -> Emitted: ...
    def peer_closed(self) -> Emitted: ...
    def post_failed(self, posted: int) -> Emitted: ...
    def poll_failed(self) -> Emitted: ...
    def crash(self) -> None: ...
    def view(self) -> Any: ...


# (configuration, rank, granted receive depth) -> an implementation of that rank
Factory = Callable[[GateConfig, int, int], GateImpl]


def reference(cfg: GateConfig, rank: int, grant: int) -> GateEngine:
    return GateEngine(cfg, grant)


CALLS = {name_of(GateSpec.do_call_gate), name_of(GateSpec.do_bad_call)}
READS = {name_of(f) for f in (GateSpec.do_barrier_read, GateSpec.do_big_header_read,
                              GateSpec.do_big_barrier_read, GateSpec.do_block_header_read,
                              GateSpec.do_block_barrier_read, GateSpec.do_batch_header_read)}
# steps of the fabric, and faults that only put an entry in a CQ: no rank acts
WORLD = {name_of(f) for f in (GateSpec.do_transmit, GateSpec.do_deliver, GateSpec.do_lose,
                              GateSpec.do_error_completion, GateSpec.do_stray_completion)}
SETUP, CALL_BIG, CALL_BLOCK, CONSUME, REAP, TIMEOUT, PEER_GONE, CRASH = (
    name_of(f) for f in (GateSpec.do_setup, GateSpec.do_call_big, GateSpec.do_call_block,
                         GateSpec.do_consume, GateSpec.do_reap, GateSpec.do_timeout,
                         GateSpec.do_peer_gone, GateSpec.do_crash))
POST_FAIL, POLL_FAIL = name_of(GateSpec.do_post_fail), name_of(GateSpec.do_poll_fail)
# the spec's steps that are not a rank's own (``advance``): everything ``call_of`` maps to
# another call, or to none
NOT_OWN = CALLS | READS | WORLD | {SETUP, CALL_BIG, CALL_BLOCK, CONSUME, REAP, TIMEOUT,
                                   PEER_GONE, CRASH, POST_FAIL, POLL_FAIL}
# the reactions that are any of a group of the spec's steps: a TCP read, a rank's own step
A_READ, OWN_STEP = "a TCP read", "a step of its own"
READ_GROUP = frozenset(READS)
FAULT_RATE = 0.01        # a fault at about one step in a hundred where one can happen
VIEW_FIELDS = tuple(f.name for f in fields(RankView))


class Disagreement(Exception):
    def __init__(self, what: str, expected: Any, actual: Any):
        super().__init__(what)
        self.what, self.expected, self.actual = what, expected, actual


def _wr(w: Any) -> tuple:
    return (w.wr_id, w.buf, w.offset, w.length, w.signaled)


def _completion(c: Any) -> Completion:
    return Completion(c.opcode, c.wr_id, fb.WC_STATUS_CODE[c.status], c.byte_len)


def _wait(phase: str, view: Any) -> str:
    """A rank's wait, in words, for a reaction's mismatch."""
    return "while " + {
        WAIT: f"waiting for gate {view.last_gate_seq + 1}", DRAIN_WAIT: "waiting for its drain",
        BIG_XFER: "waiting in a big-gate window", BLOCK_WAIT: "waiting for a verify-block layer",
        BLOCK_END: "waiting for its verify block's end",
        ARM_BAR_READ: "reading the window barrier", BIG_HDR_READ: "reading a big-gate header",
        BIG_BAR_READ: "reading a big-gate barrier", BLOCK_HDR_READ: "reading a verify-block header",
        BLOCK_BAR_READ: "reading the verify-block barrier",
        BATCH_HDR_READ: "reading a batch header"}.get(phase, "waiting")


@dataclass(frozen=True)
class Call:
    """The implementation call a spec step means: ``method`` of GateImpl on rank ``rank``
    with ``args``. A reap first checks the poll: ``poll`` is (entries the CQ holds, entries
    the spec's poll took)."""

    rank: int
    method: str
    args: tuple = ()
    poll: tuple[int, int] | None = None


def call_of(pre: GateState, name: str, args: tuple, obs: Observation) -> Call | None:
    """Which call of a rank's implementation the spec step ``name(args)`` from ``pre`` with
    observation ``obs`` is; None for a step no rank takes (the fabric's, or a fault that only
    puts an entry in a CQ)."""
    if name in WORLD:
        return None
    rank = args[0]
    if name == SETUP:
        return Call(rank, GateImpl.setup.__name__)
    if name in CALLS:
        return Call(rank, GateImpl.call_gate.__name__, tuple(args[1:]))
    if name == CALL_BIG:
        return Call(rank, GateImpl.call_big.__name__, (args[1],))
    if name == CALL_BLOCK:
        return Call(rank, GateImpl.call_block.__name__)
    if name == CONSUME:
        return Call(rank, GateImpl.consume.__name__)
    if name in READS:
        return Call(rank, GateImpl.tcp_read.__name__, (obs.tcp_in[0],))
    if name == REAP:
        polled = tuple(_completion(c) for c in obs.polled)
        return Call(rank, GateImpl.completions.__name__, (polled,),
                    (len(pre.fabric.qps[rank].cq), len(obs.polled)))
    if name == TIMEOUT:
        return Call(rank, GateImpl.timeout.__name__)
    if name == PEER_GONE:
        return Call(rank, GateImpl.peer_closed.__name__)
    if name == CRASH:
        return Call(rank, GateImpl.crash.__name__)
    if name == POST_FAIL:
        return Call(rank, GateImpl.post_failed.__name__, (args[1],))
    if name == POLL_FAIL:
        return Call(rank, GateImpl.poll_failed.__name__)
    return Call(rank, GateImpl.advance.__name__)


# what a step emits, compared field by field: (name in a mismatch, attribute of Observation
# and of Emitted)
EMISSION = (("receives posted", "recvs"), ("sends posted", "sends"), ("TCP writes", "tcp_out"),
            ("result", "result"), ("log", "log"))


def emission(e: Observation | Emitted) -> tuple[tuple[str, Any], ...]:
    """The emitted fields of a spec observation or an implementation's Emitted, in the one
    form both are compared in."""
    return tuple((what, tuple(map(_wr, getattr(e, attr))) if attr in ("recvs", "sends")
                  else getattr(e, attr)) for what, attr in EMISSION)


class GateHarness(Harness):
    """Lockstep runs of the spec's gate system with an implementation on each rank."""

    system: GateSystem

    def __init__(self, system: GateSystem, factory: Factory = reference):
        super().__init__(system, factory)

    def fresh(self) -> tuple[GateState, list[GateImpl]]:
        grants = self.system.spec.rq_grant
        own = self.system.params.of_rank
        return self.system.initial(), [self.factory(own(r), r, grants[r]) for r in (0, 1)]

    def deliver(self, impls: Sequence[GateImpl], pre: GateState, name: str,
                args: tuple, obs: Observation) -> Emitted | None:
        """Hand one spec step to the implementation it belongs to; what it emitted (None when
        no rank acts). Raises Disagreement where it differs before it acts."""
        call = call_of(pre, name, args, obs)
        if call is None:
            return None
        impl = impls[call.rank]
        if call.poll is not None:
            # the implementation polls as many as it asks for, up to what the CQ holds
            held, polled = call.poll
            asked = min(impl.poll_size(), held)
            if asked != polled:
                raise Disagreement("completions polled", polled, asked)
        if call.method == GateImpl.setup.__name__:
            # the rank's hello reads what its peer was built with
            return impl.setup(self.system.params.of_rank(1 - call.rank).hello)
        if call.method == GateImpl.crash.__name__:
            impl.crash()
            return Emitted()
        if call.method == GateImpl.post_failed.__name__:
            # the rank takes its step, then its driver's post is refused part-way: what was
            # up before the refused call stays posted (receives are posted before sends)
            (posted,) = call.args
            step, failed = impl.advance(), impl.post_failed(posted)
            return Emitted(recvs=step.recvs[:posted],
                           sends=step.sends[:max(0, posted - len(step.recvs))],
                           result=failed.result, log=step.log + failed.log)
        return getattr(impl, call.method)(*call.args)

    @staticmethod
    def compare(obs: Observation, got: Emitted | None, impls: Sequence[GateImpl]
                ) -> tuple[str, Any, Any] | None:
        """The first field in which the implementation differs from the spec's observation."""
        if got is not None:
            for (what, want), (_, have) in zip(emission(obs), emission(got), strict=True):
                if want != have:
                    return what, want, have
        for r, impl in enumerate(impls):
            view = impl.view()
            for f in VIEW_FIELDS:
                want, have = getattr(obs.views[r], f), getattr(view, f)
                if want != have:
                    return f"rank {r} {f}", want, have
        return None

    def run(self, rng: random.Random, max_steps: int, fault_rate: float = FAULT_RATE,
            swarm: Swarm | None = None) -> Run:
        """One random run of at most ``max_steps``: at each step a fault with probability
        ``fault_rate`` where one is enabled, otherwise an enabled progress step, weighted as
        one of the system's workload profiles says (long runs of decode gates, or big gates
        between them), other steps equally likely. With a ``swarm``, the faults it leaves out
        are never taken and it names the profile; without, every fault may be taken and the
        profile is drawn from ``rng``."""
        k = rng.randrange(self.profiles()) if swarm is None else swarm.profile
        weight = {name: w[k] for name, w in self._progress_weights().items()}
        off = swarm.off if swarm is not None else frozenset()

        def choose(s: GateState, i: int) -> tuple[Action, tuple] | None:
            if i > max_steps:
                return None
            choices = [(a, args) for a in self.system.actions if a.name not in off
                       for args in a.enabled(s)]
            faults = [c for c in choices if c[0].fault]
            progress = [c for c in choices if not c[0].fault]
            if faults and (not progress or rng.random() < fault_rate):
                return rng.choice(faults)
            ws = [weight.get(a.name, 1) for a, _ in progress]
            if not any(ws):
                return None
            return rng.choices(progress, weights=ws)[0]

        return self._lockstep(choose)

    def _progress_weights(self) -> dict[str, tuple[int, ...]]:
        """The system's workload profiles for progress steps (faults come at the fault rate,
        whatever weight exploration gives them)."""
        faulty = {a.name for a in self.system.actions if a.fault}
        return {n: w for n, w in self.system.weights.items() if n not in faulty}

    def profiles(self) -> int:
        """How many workload profiles the system's weights give a run the choice of."""
        return min(map(len, self._progress_weights().values()), default=1)

    def check(self, impls: Sequence[GateImpl], pre: GateState, name: str, args: tuple,
              post: GateState, obs: Observation) -> tuple[str, Any, Any] | None:
        """``_step`` as the runs and sweeps call it (``lockstep.StepCheck``), then the second
        direction: a reaction either implementation has in ``post`` that the spec does not
        offer there (``reactions``)."""
        return (self._step(impls, pre, name, args, obs)
                or unoffered(self.system, post, self.reactions(impls, post),
                             lambda r: self.taken(impls, post, r)))

    def reactions(self, impls: Sequence[GateImpl], s: GateState) -> Iterator[Reaction]:
        """What each rank's implementation would do next by its own state (``next_step``:
        the wait it is in, or a step of its own) and the world's queues in ``s`` (its CQ,
        what its peer wrote to it over TCP), as the spec's steps: in a CQ wait, reporting
        what its CQ holds (``reap``); in a TCP read with an item to read, reading it; in
        either wait with nothing to read, a timeout where the configuration explores faults,
        and ``peer_gone`` where its peer's implementation is dead (failed or crashed); with
        failing posts and polls explored, a poll failure in a CQ wait and a refused post at
        the first work request of a step of its own that posts; and a step of its own where it
        has one. None for an implementation without ``next_step``."""
        steps = [getattr(impl, "next_step", None) for impl in impls]
        if None in steps:
            return
        now = [step() for step in steps]
        for r in (0, 1):
            yield from self._rank_reactions(impls[r], s, r, now[r], now[1 - r] == DEAD)

    def _rank_reactions(self, impl: GateImpl, s: GateState, r: int, step: str,
                        peer_dead: bool) -> Iterator[Reaction]:
        """Rank ``r``'s reactions (see ``reactions``), its driver's next step being ``step``."""
        cfg = self.system.params
        failures = cfg.faults and cfg.post_failures
        view = impl.view()
        to_read = bool(s.fabric.tcp[1 - r])
        waiting = step == POLL or (step == READ and not to_read)
        where = f" {_wait(view.phase, view)}" if waiting else ""

        def of(action: str, how: str, *more: Any, group: frozenset[str] = frozenset()
               ) -> Reaction:
            return Reaction(action, (r, *more), f"{how}{where}", r, view.phase, group)

        if step == POLL and s.fabric.qps[r].cq:
            yield of(REAP, "report the completions its CQ holds")
        if step == READ and to_read:
            yield of(A_READ, f"read {s.fabric.tcp[1 - r][0].describe()}", group=READ_GROUP)
        if waiting and cfg.faults:
            yield of(TIMEOUT, "time out")
        if waiting and peer_dead:
            yield of(PEER_GONE, "fail with peer gone")
        if step == POLL and failures:
            yield of(POLL_FAIL, "fail a poll of its CQ")
        if step == ADVANCE:
            yield of(OWN_STEP, "take a step of its own", group=self.own)
            if failures:
                yield of(POST_FAIL, "have its step's first post refused", 0)

    @property
    def own(self) -> frozenset[str]:
        """The spec's steps a rank takes on its own (``advance``)."""
        kept = self.__dict__.get("_own")
        if kept is None:
            kept = self.__dict__["_own"] = frozenset(
                a.name for a in self.system.actions if a.name not in NOT_OWN)
        return kept

    def taken(self, impls: Sequence[GateImpl], s: GateState, r: Reaction) -> str | None:
        """The reaction ``r`` tried on a copy of its rank's implementation in ``s``: what it
        did, in words (ds4's text where it failed), or None where it refused the step (an
        engine that raises on it, or a step that posts nothing to refuse)."""
        impl = copy.deepcopy(impls[r.rank])
        peer = 1 - r.rank
        try:
            if r.action == REAP:
                asked = impl.poll_size()
                cq = s.fabric.qps[r.rank].cq
                out = impl.completions(tuple(_completion(c) for c in cq[:asked]))
            elif r.action == A_READ:
                out = impl.tcp_read(s.fabric.tcp[peer][0])
            elif r.action == TIMEOUT:
                out = impl.timeout()
            elif r.action == PEER_GONE:
                out = impl.peer_closed()
            elif r.action == POLL_FAIL:
                out = impl.poll_failed()
            elif r.action == POST_FAIL:
                step = impl.advance()
                if not (step.recvs or step.sends):
                    return None
                out = impl.post_failed(0)
            else:
                out = impl.advance()
        except Exception:   # the implementation does not take this step here
            return None
        said = f": {out.result!r}" if out.result else ""
        return f"{r.how} (rank {r.rank} in phase {r.phase}{said})"

    def reached(self, s: GateState) -> dict[str, int]:
        """How far a run got, by the system's depth measures."""
        return self.system.depth(s)

    def _step(self, impls: Sequence[GateImpl], pre: GateState, name: str, args: tuple,
              obs: Observation) -> tuple[str, Any, Any] | None:
        """One spec step handed to the implementations: the first difference, or None."""
        try:
            return self.compare(obs, self.deliver(impls, pre, name, args, obs), impls)
        except Disagreement as d:
            return d.what, d.expected, d.actual
        except Exception as e:      # an implementation refusing the step is a mismatch
            return "the step", "taken", f"{type(e).__name__}: {e}"


# ---------------------------------------------------------------------------- the suite
def _native() -> Factory:
    from verbspec.refimpl.bindings.native_gate import module, native_engine

    module()        # ValueError: not built
    return native_engine


def _variant_engine(name: str) -> Factory:
    from verbspec.refimpl.engines.gate_variants import variant_engine

    return variant_engine(name)


def _not_gate() -> Factory:
    raise ValueError("--impl ucx is UCX's tag matching: it runs with --protocol tagmatch")


def resolve(impl: str) -> Factory:
    """``refimpl`` (the reference engine), ``native`` (the C engine,
    refimpl/bindings/native_gate.py; ValueError where it was not built), ``variant:NAME`` (the
    reference engine behaving as the named variant, refimpl/engines/gate_variants.py) or
    ``MODULE:FACTORY``, a callable (configuration, rank, granted depth) -> implementation;
    ValueError naming what is wrong. See ``lockstep.resolve``."""
    return lockstep.resolve(impl, reference, _native, _variant_engine, {"ucx": _not_gate})


def conform(system: GateSystem, factory: Factory, impl: str, *, sequences: int, steps: int,
            seed: int = 0, fault_rate: float = FAULT_RATE, shrink_seconds: float = SHRINK_SECONDS,
            progress: Callable[[str], None] | None = None,
            each: Callable[[Run], bool] | None = None, keep_going: bool = False
            ) -> ConformanceReport:
    """Random lockstep runs, generated by Hypothesis with a swarm of faults (see
    ``refimpl.random_runs``; ``seed`` seeds the generation), until ``sequences`` have run or
    one differs (with ``keep_going``: all of them); a mismatching run is reduced, for at most
    ``shrink_seconds``, and kept, ending at its first mismatching step. ``each``, where
    given, sees every run as it ends and ends the runs by returning False."""
    harness = GateHarness(system, factory)
    return conform_runs(harness, impl,
                        lambda rng, swarm: harness.run(rng, steps, fault_rate, swarm),
                        optional=[a.name for a in system.actions if a.fault],
                        profiles=harness.profiles(), sequences=sequences, seed=seed,
                        shrink_seconds=shrink_seconds, progress=progress, every=1, each=each,
                        keep_going=keep_going)


# every path up to PATH_DEPTH steps, in a configuration at the size of the sweep's largest
# (windows of 4, two-chunk vectors, a drain and a big gate of up to 3 chunks, a fault):
# (parameters, fault actions per path)
PATH_CONFIGS: tuple[tuple[dict[str, int], int], ...] = (
    ({"window": 4, "vec_bytes": 24576, "chain_max": 2, "big_gates": 1, "big_depth": 2,
      "big_last_bytes": 4096, "ops": 3, "faults": 1}, 1),
)
PATH_DEPTH = 10

# a wire that loses messages (the `lose` action) is outside the model's scope, so not among the
# refinement check's configurations: swept after them, over UC with one fault per run (a loss,
# or any other fault) and over RC with two-chunk vectors and one loss per run
LOSS_CONFIGS: tuple[tuple[dict[str, Any], int], ...] = (
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 1,
      "wire_loss": 1}, 1),
    ({"window": 2, "vec_bytes": 24576, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 0,
      "wire_loss": 1, "qp_type": "rc"}, 1),
)

# verify blocks are outside the model's scope too: swept after the lossy wire, two-layer
# blocks beside decode gates (a drain before each block that follows one) and beside big
# gates, with every fault action, with two rows a layer, and alone with two-chunk vectors
BLOCK_CONFIGS: tuple[tuple[dict[str, Any], int], ...] = (
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 3, "big_gates": 0, "faults": 0,
      "verify_blocks": 1}, 0),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 1,
      "big_depth": 2, "faults": 0, "verify_blocks": 1}, 0),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0, "faults": 1,
      "verify_blocks": 1}, 1),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 0,
      "verify_blocks": 1, "block_rows": 2}, 0),
    ({"window": 2, "vec_bytes": 24576, "chain_max": 2, "ops": 1, "big_gates": 0, "faults": 0,
      "verify_blocks": 1}, 0),
    # the verify window switched off (DS4_TP_DISABLE_VERIFY_WINDOW): a block's layers are
    # batch gates, beside decode gates, in two windows with a short last chunk, and faulted
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 0,
      "verify_blocks": 1, "verify_window": "off"}, 0),
    ({"window": 2, "vec_bytes": 100, "max_msg": 64, "chain_max": 2, "ops": 1, "big_gates": 0,
      "big_depth": 2, "faults": 0, "verify_blocks": 1, "block_rows": 2,
      "verify_window": "off"}, 0),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0, "faults": 1,
      "verify_blocks": 1, "verify_window": "off"}, 1),
)

# failing posts and polls (post_failures=1), outside the model too: swept last, one fault a run,
# among decode gates, in a big gate (and its drain) and in a verify block
POST_FAILURE_CONFIGS: tuple[tuple[dict[str, Any], int], ...] = (
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 1,
      "post_failures": 1}, 1),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 1, "big_depth": 2,
      "faults": 1, "post_failures": 1}, 1),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0, "faults": 1,
      "post_failures": 1, "verify_blocks": 1}, 1),
)

# ranks built with another message cap or receive window (rank1_max_msg, rank1_window), also
# outside the model: their hellos refuse each other at setup; and verify blocks of other rows
# (rank1_block_rows), whose headers refuse each other, and a rank with its verify window
# switched off (rank1_verify_window), whose batch header its peer's block header refuses
PER_RANK_CONFIGS: tuple[tuple[dict[str, Any], int], ...] = (
    ({"window": 2, "vec_bytes": 24576, "rank1_max_msg": 24576, "chain_max": 2, "ops": 1,
      "big_gates": 0, "faults": 0}, 0),
    ({"window": 2, "rank1_window": 3, "vec_bytes": 100, "chain_max": 2, "ops": 1,
      "big_gates": 0, "faults": 0}, 0),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 1, "big_gates": 0, "faults": 0,
      "verify_blocks": 1, "rank1_block_rows": 2}, 0),
    ({"window": 2, "vec_bytes": 100, "chain_max": 2, "ops": 2, "big_gates": 0, "faults": 0,
      "verify_blocks": 1, "rank1_verify_window": "off"}, 0),
)


def conform_every_edge(factory: Factory, impl: str,
                       progress: Callable[[str], None] | None = None,
                       keep_going: bool = False, depth: int | None = None
                       ) -> ConformanceReport:
    """Every reachable edge of the small base-protocol configurations the model's refinement
    check uses (decode gates past a window of 2, a drain, big gates of up to 3 chunks, every
    fault action), of LOSS_CONFIGS (a lossy wire), BLOCK_CONFIGS (verify blocks),
    POST_FAILURE_CONFIGS (failing posts and polls) and PER_RANK_CONFIGS (ranks built apart),
    each executed once in lockstep, then
    every path of up to ``depth`` (default PATH_DEPTH) steps of PATH_CONFIGS; stops at the
    first mismatch (with ``keep_going``: a configuration's sweep or walk stops there, and the
    next one runs)."""
    from verbspec.proofs.gate.refinement import CONFIGS

    base = [(values, faults) for values, variants, faults in CONFIGS if not variants]
    base += LOSS_CONFIGS + BLOCK_CONFIGS + POST_FAILURE_CONFIGS + PER_RANK_CONFIGS
    out = ConformanceReport(impl, "gate", sweep=lockstep.new_sweep())
    return lockstep.exhaustive(out, _plan(out, factory, base, depth or PATH_DEPTH), len(base),
                               progress, keep_going)


def _plan(out: ConformanceReport, factory: Factory,
          base: Sequence[tuple[dict[str, Any], int]], depth: int) -> Iterator[Planned]:
    """The configurations of ``conform_every_edge`` as their turns come: every edge of each
    of ``base`` (the report's ``actions_total`` then the actions of those swept so far,
    together), then every path up to ``depth`` steps of PATH_CONFIGS."""
    from verbspec.spec.gate.system import build

    names: set[str] = set()     # the actions of the configurations swept, together
    for values, faults in base:
        system = build(values)
        names |= {a.name for a in system.actions}
        out.actions_total = len(names)
        yield GateHarness(system, factory), 0, faults
    for values, faults in PATH_CONFIGS:
        yield GateHarness(build(values), factory), depth, faults
