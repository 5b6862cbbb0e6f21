"""The z3 model checked against the executable spec as it is now, before it proves anything.

The model is a separate text: a proof about it says something of the spec only while every
step of the spec is a step of the model. For each of a fixed set of small configurations that
together take every action (decode gates past the window, drains, big gates over several
windows, every fault action, every variant the model encodes) every reachable state of the
spec is visited breadth-first and every enabled (state, action) edge is checked: alpha(pre) ->
alpha(post) satisfies the model's move for that action, and the model's property verdicts at
alpha(post) are the spec's. The abstraction is defined up to the first state an invariant
rejects, so such a state is checked but not expanded. And conversely: from every abstract state
reached, each move of the model that takes no choice and whose guard holds there must be a step
some spec state behind it offers, so that a spec which stops offering a behaviour the model
(and the implementations) have is caught too ("the model allows X; the spec no longer does").

A passing check is cached under a digest of the source it imports (the spec and the model's
moves, not the induction), so an unchanged spec and model pay for it once; a divergence is
never cached.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields
from functools import cache
from multiprocessing import get_context
from pathlib import Path
from typing import Any, NamedTuple

import z3

from verbspec.proofs.evaluator import Evaluator, compile_terms
from verbspec.proofs.gate.abstraction import alpha, no_choices, step_choices, value_terms
from verbspec.proofs.gate.moves import action_move, move
from verbspec.proofs.gate.parameters import params_of
from verbspec.proofs.gate.properties import CONSEQUENCES, PROPERTIES
from verbspec.proofs.gate.terms import fresh_choice, fresh_params, fresh_state
from verbspec.proofs.gate.vocabulary import CALL_BIG_STEP, REAP_STEP
from verbspec.proofs.report import DIVERGENCE
from verbspec.proofs.solving import default_workers
from verbspec.spec.gate.variants import (
    DEPTH_MISMATCH,
    NO_BARRIER,
    NO_SEQ_CHECK,
    SIGNAL_LAST_ONLY,
    TAG_EVERY_CHUNK,
)
from verbspec.spec.lts import Trace, TraceStep

# (parameters, variants, fault actions per run): small enough to visit every state, together
# taking every action but lose (wire loss is outside the model's scope)
TWO = {"window": 2, "vec_bytes": 100, "chain_max": 2}
BIG = {**TWO, "big_gates": 1, "big_depth": 2, "big_last_bytes": 8}   # short last chunks
Config = tuple[Mapping[str, Any], Sequence[str], int]
CONFIGS: tuple[Config, ...] = (
    # decode gates: three in a row through a window of two, one- and two-chunk vectors
    ({**TWO, "ops": 3, "big_gates": 0, "faults": 0}, (), 0),
    ({**TWO, "vec_bytes": 24576, "ops": 3, "big_gates": 0, "faults": 0}, (), 0),
    # drains and big gates: a big gate of up to 3 chunks through windows of 2
    ({**BIG, "ops": 3, "faults": 0}, (), 0),
    # every fault action: one in two decode gates, two in one (a crash, then the peer sees
    # it gone), one in a big gate
    ({**TWO, "ops": 2, "big_gates": 0, "faults": 1}, (), 1),
    ({**TWO, "ops": 1, "big_gates": 0, "faults": 1}, (), 2),
    ({**BIG, "ops": 1, "faults": 1}, (), 1),
    # the variants the model encodes
    ({**TWO, "ops": 3, "big_gates": 0, "faults": 0}, (NO_BARRIER.name,), 0),
    ({**TWO, "vec_bytes": 24576, "ops": 2, "big_gates": 0, "faults": 0}, (TAG_EVERY_CHUNK.name,),
     0),
    ({**TWO, "vec_bytes": 24576, "ops": 2, "big_gates": 0, "faults": 0},
     (SIGNAL_LAST_ONLY.name,), 0),
    ({**TWO, "ops": 3, "big_gates": 0, "faults": 0}, (NO_SEQ_CHECK.name,), 0),
    ({**BIG, "ops": 1, "faults": 0, "big_depth": 3}, (DEPTH_MISMATCH.name,), 0),
)
CHOOSING = (REAP_STEP, CALL_BIG_STEP)   # the actions whose moves take choices
MAX_STATES = 200_000        # per configuration; a configuration past it is a bug in CONFIGS


@dataclass(frozen=True)
class Refinement:
    """What the check covered and, if the model diverged, where."""

    configurations: int
    states: int
    edges: int
    actions: tuple[str, ...]        # the actions taken at least once
    seconds: float
    cached: bool = False
    divergence: str | None = None   # the first diverging step, said in words
    trace: Trace | None = None      # the run up to and including that step

    @property
    def coverage(self) -> str:
        how = "cached" if self.cached else f"{self.seconds:.1f} s"
        return (f"the model was checked against the spec on every edge of "
                f"{self.configurations} configurations ({self.states:,} states, "
                f"{self.edges:,} edges, {len(self.actions)} actions; {how})")


class CompiledModel:
    """The model's moves and property verdicts at one configuration's parameters, compiled,
    and the spec's system at the same configuration."""

    def __init__(self, values: Mapping[str, Any], variants: Sequence[str]) -> None:
        from verbspec.spec.gate.system import build

        self.system = build(values, variants)
        self.cfg = cfg = self.system.params
        self.state_invs = [inv for inv in self.system.invariants if inv.over == "state"]
        s, t, ch, prm = fresh_state("s"), fresh_state("t"), fresh_choice("s"), fresh_params()
        ppairs = value_terms(params_of(cfg, variants), prm)
        self.state_masks = [(1 << v.size()) - 1 if z3.is_bv(v) else 0 for _, v in s.items()]
        self.choice_masks = [(1 << v.size()) - 1 if z3.is_bv(v) else 0 for _, v in ch.items()]
        self.no_choice = _values(no_choices(), self.choice_masks)
        variables = [v for rec in (s, t, ch) for _, v in rec.items()]
        self.moves: dict[tuple[str, int], Evaluator] = {}
        self._build = lambda name, r: compile_terms(
            [z3.simplify(z3.substitute(move(name, r, s, t, prm, ch), *ppairs))], variables)
        props = {**PROPERTIES, **CONSEQUENCES}
        self.names = list(props)
        self.props = compile_terms(
            [z3.simplify(z3.substitute(props[n](t, prm), *ppairs)) for n in self.names],
            [v for _, v in t.items()])
        # the converse direction: the guard of every move that takes no choice, for each
        # rank, at one abstract state (all compiled into one evaluator)
        self.guarded = [(a.name, r) for a in self.system.actions if a.name not in CHOOSING
                        for r in (0, 1)]
        self.guards = compile_terms(
            [z3.simplify(z3.substitute(action_move(n, r, s, prm, ch).guard, *ppairs))
             for n, r in self.guarded], [v for rec in (s, ch) for _, v in rec.items()])

    def allowed(self, values: list[Any]) -> list[tuple[str, int]]:
        """The moves (action, rank) the model allows from an abstract state: those whose
        guard holds there (the moves that take no choice)."""
        return [m for m, ok in zip(self.guarded, self.guards(values + self.no_choice),
                                   strict=True) if ok]

    def move(self, name: str, r: int) -> Evaluator:
        if (name, r) not in self.moves:
            self.moves[(name, r)] = self._build(name, r)
        return self.moves[(name, r)]

    def view(self, st: Any) -> View:
        """A spec state's abstract values, whether the spec's invariants all hold there, and
        the first invariant on which the model's verdict there differs from the spec's."""
        values = _values(alpha(self.cfg, st), self.state_masks)
        spec_ok = {inv.name: inv.check(st) is None for inv in self.state_invs}
        verdicts = zip(self.names, self.props(values), strict=True)
        wrong = next((f"the spec says {n} {'holds' if spec_ok[n] else 'fails'}, the model "
                      f"disagrees" for n, ok in verdicts if ok != spec_ok[n]), None)
        return View(values, all(spec_ok.values()), wrong)

    def edge(self, pre: Any, name: str, args: tuple, a_pre: list[Any], post: View
             ) -> str | None:
        """Where one spec step and the model part ways, in words; None if they agree."""
        choice = (_values(step_choices(self.cfg, pre, name, args), self.choice_masks)
                  if name in CHOOSING else self.no_choice)
        if not self.move(name, args[0])(a_pre + post.values + choice)[0]:
            return f"{name}{args} is not a step of the model"
        if post.wrong is not None:
            return f"after {name}{args} {post.wrong}"
        return None


class View(NamedTuple):
    """A spec state as the refinement check sees it (computed once per state)."""

    values: list[Any]           # alpha's values, flattened
    spec_ok: bool               # every invariant of the spec holds
    wrong: str | None           # where the model's verdicts differ from the spec's


def _values(rec: Any, masks: Sequence[int]) -> list[Any]:
    """A record of values (State or Choices), flattened in the order of its ``items()``, each
    value cut to its variable's width (mask 0: a Boolean)."""
    flat = []
    for name in _field_names(type(rec)):
        part = getattr(rec, name)
        for sub in part if isinstance(part, tuple) else (part,):
            flat.extend(vars(sub).values())
    return [v & m if m else bool(v) for v, m in zip(flat, masks, strict=True)]


@cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _path(parent: Mapping[Any, Any], system: Any, last: Any, variants: Sequence[str]
          ) -> Trace:
    table = {a.name: a for a in system.actions}
    steps, cur = [], last
    while parent[cur] is not None:
        pre, name, args, obs = parent[cur]
        steps.append(TraceStep(name, dict(zip(table[name].params, args, strict=True)),
                               cur[0], obs))
        cur = pre
    steps.append(TraceStep("init", {}, cur[0]))
    return Trace(system.protocol, system.param_dict(), tuple(variants), steps[::-1])


def check_config(values: Mapping[str, Any], variants: Sequence[str] = (), max_faults: int = 1
                 ) -> tuple[int, int, set[str], str | None, Trace | None]:
    """Every edge of one configuration, in runs of at most ``max_faults`` fault actions:
    (states, edges, actions taken, divergence, trace)."""
    model = CompiledModel(values, variants)
    system = model.system
    acts = [a for a in system.actions if not a.fault or system.params.faults]
    seen: dict[Any, View] = {}

    def view(st: Any) -> View:
        got = seen.get(st)
        if got is None:
            got = seen[st] = model.view(st)
        return got

    init = system.initial()
    # a node is a state and the fault actions taken to reach it (at most max_faults)
    parent: dict[Any, Any] = {(init, 0): None}
    frontier, edges, taken = [(init, 0)], 0, set()
    # the converse direction: per abstract state, the (action, rank) steps some spec state
    # behind it offers (fault steps whatever the run's fault count), and one node behind it
    offered: dict[tuple[Any, ...], set[tuple[str, int]]] = {}
    behind: dict[tuple[Any, ...], Any] = {}
    while frontier:
        nxt = []
        for node in frontier:
            pre, faults = node
            v_pre = view(pre)
            a_pre = v_pre.values
            key_pre = tuple(a_pre)
            here = offered.setdefault(key_pre, set())
            behind.setdefault(key_pre, node)
            for act in acts:
                for args in act.enabled(pre):
                    here.add((act.name, args[0]))
                    if act.fault and faults >= max_faults:
                        continue
                    post, obs = act.apply(pre, *args)
                    edges += 1
                    taken.add(act.name)
                    seen_post = view(post)
                    bad = model.edge(pre, act.name, args, a_pre, seen_post)
                    key = (post, faults + act.fault)
                    if bad is not None:
                        parent.setdefault(key, (node, act.name, args, obs))
                        trace = _path(parent, system, key, variants)
                        trace.violation, trace.message = DIVERGENCE, bad
                        return len(parent), edges, taken, bad, trace
                    if key in parent:
                        continue
                    parent[key] = (node, act.name, args, obs)
                    if seen_post.spec_ok:
                        nxt.append(key)
                    if len(parent) > MAX_STATES:
                        raise RuntimeError(f"refinement configuration {dict(values)} "
                                           f"{list(variants)} has over {MAX_STATES} states")
        frontier = nxt
    names = {a.name for a in acts}
    for key_pre, here in offered.items():
        if not view(behind[key_pre][0]).spec_ok:
            continue            # the abstraction ends at a state an invariant rejects
        extra = [(n, r) for n, r in model.allowed(list(key_pre))
                 if n in names and (n, r) not in here]
        if extra:
            n, r = extra[0]
            phase = behind[key_pre][0].ranks[r].phase
            bad = (f"the model allows {n} (rank {r}, in phase {phase}) from a reachable state "
                   f"where the spec no longer does: no spec state behind that abstract state "
                   f"offers it")
            trace = _path(parent, system, behind[key_pre], variants)
            trace.violation, trace.message = DIVERGENCE, bad
            return len(parent), edges, taken, bad, trace
    return len(parent), edges, taken, None, None


def first_divergence(trace: Trace) -> tuple[int, str] | None:
    """The first step of a spec trace (its index, and what differs) that is not a step of the
    model, or after which the model's verdicts are not the spec's; None if every step is."""
    model = CompiledModel(trace.params, trace.variants)
    steps = trace.steps
    a_pre = model.view(steps[0].state).values
    for i, (pre, step) in enumerate(zip(steps, steps[1:], strict=False), start=1):
        post = model.view(step.state)
        bad = model.edge(pre.state, step.action, tuple(step.args.values()), a_pre, post)
        if bad is not None:
            return i, bad
        a_pre = post.values
    return None


def source_files() -> list[Path]:
    """The source the check depends on: this module and every verbspec module it imports,
    directly or through others (the whole executable spec, the model's moves, terms and
    properties; not the induction and its lemmas, whose edits need no new check)."""
    seen: dict[str, Path] = {}
    todo = [__name__]
    while todo:
        name = todo.pop()
        if name in seen or not name.startswith("verbspec."):
            continue
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:      # ``from module import name``: a name, not a module
            continue
        if spec is None or spec.origin is None:
            continue
        path = seen[name] = Path(spec.origin)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                todo += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
    return sorted(seen.values())


def source_digest() -> str:
    """A digest of the source the check depends on (:func:`source_files`)."""
    h = hashlib.sha256()
    for p in source_files():
        h.update(f"{p.parent.name}/{p.name}".encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    """Where passing checks are remembered: $VERBSPEC_CACHE, else ~/.cache/verbspec."""
    env = os.environ.get("VERBSPEC_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "verbspec"


def _check_job(job: Config) -> tuple[int, int, set[str], str | None, Trace | None]:
    return check_config(*job)


def check(configs: Sequence[Config] = CONFIGS, *,
          cache: Path | None = None, workers: int | None = None) -> Refinement:
    """The refinement check over ``configs`` (in a pool of ``workers`` processes, default one
    per core); with ``cache``, a pass is remembered there under the source digest (and read
    back instead of checking again)."""
    jobs = [(dict(v), tuple(w), f) for v, w, f in configs]
    key = hashlib.sha256(json.dumps([source_digest(), jobs], sort_keys=True).encode()
                         ).hexdigest()[:16]
    path = cache / f"refinement-{key}.json" if cache is not None else None
    if path is not None and path.is_file():
        try:
            kept = json.loads(path.read_text())
            return Refinement(kept["configurations"], kept["states"], kept["edges"],
                              tuple(kept["actions"]), kept["seconds"], cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            pass            # an unreadable cache entry is checked again and rewritten
    t0 = time.perf_counter()
    states = edges = 0
    taken: set[str] = set()
    if workers is None:
        workers = default_workers()
    if workers > 1:
        # spawn, as the solver pool does: a fresh interpreter, not a fork of one holding z3
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            answers = list(pool.map(_check_job, jobs))
    else:
        answers = [_check_job(job) for job in jobs]
    for (values, variants, _), (n, e, acts, bad, trace) in zip(jobs, answers, strict=True):
        states, edges, taken = states + n, edges + e, taken | acts
        if bad is not None:
            where = f"with {dict(values)}" + (f" and {list(variants)}" if variants else "")
            return Refinement(len(configs), states, edges, tuple(sorted(taken)),
                              time.perf_counter() - t0, divergence=f"{where}: {bad}",
                              trace=trace)
    done = Refinement(len(configs), states, edges, tuple(sorted(taken)),
                      time.perf_counter() - t0)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            kept = {k: v for k, v in asdict(done).items() if k not in ("trace", "divergence",
                                                                        "cached")}
            # written aside and renamed, so that a concurrent reader never sees half of it
            part = path.with_suffix(f".{os.getpid()}.part")
            part.write_text(json.dumps(kept))
            part.replace(path)
        except OSError:
            pass            # a read-only home: the check is simply not remembered
    return done
