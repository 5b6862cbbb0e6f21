"""Unbounded proofs of the matching invariants over the software list engine.

The list engine of :mod:`verbspec.spec.tagmatch.lists` is encoded over unbounded lists (z3
arrays with a length) whose entries carry what the closed system's invariants read of a receive
or a message: its envelope (communicator, source or ANY_SOURCE, tag or ANY_TAG), its length, its
id, and for a message its index in its sender's order. Ids come from one event clock ``t``
(a receive's id is when it was posted, a message's when it arrived), so id order is posted order
among receives and arrival order among messages. Histories indexed by id record each receive's
and message's status and length. Senders are FIFO (the fabric's RC connection per sender): a
message arrives only when it is the next of its sender, so every earlier message of its sender
has arrived and is either matched or on the unexpected list.

Each step (``post_recv``, ``arrive``, ``cancel``, ``probe``) reports what it did as an
:class:`Obs`, the list-engine form of the closed system's ``StepObs``. For each of the four
invariants, induction proves, for every list length and every integer envelope, length, id
and sender index, that the initial state satisfies the invariant's strengthening and that
from every state satisfying it each step keeps it and its observation satisfies the
invariant. Each step is first shown to be taken from a witness state, so its obligation
cannot hold vacuously.

- ``mpi_order``: a match (receive ``rid``, message ``mid``) leaves no pending receive posted
  before ``rid`` that matches the message and no unexpected message arrived before ``mid``
  that matches the receive; a probe names an unexpected message it matches with no earlier
  arrived unexpected match, or nothing when none matches. Strengthening: both lists strictly
  increasing in id, every id below the clock, no posted receive matches an unexpected message.
- ``non_overtaking``: a match leaves no unmatched message of the same sender, earlier in that
  sender's order, that matches the same receive. Strengthening: one sender's unexpected
  messages lie in sender order, each below the sender's next index; no matching pair.
- ``match_once``: a matched receive was neither matched nor cancelled before, a matched
  message was not matched before, a cancelled receive was pending. Strengthening: entries of
  both lists are waiting in the status histories, ids strictly increasing and below the clock,
  no id at or past the clock used yet.
- ``truncation_reported``: a match reports truncation exactly when the message's length (as it
  arrived) exceeds the receive's buffer length (as it was posted). Strengthening: the length
  column of each list agrees with the length history, ids below the clock.

Not covered here: the hardware offload (its refinement of this engine is
``offload_refines_software``, checked per instance), the closed system's wire, rendezvous and
completion steps (the system copies a match's truncation into the receive's completion code in
``_apply`` and ``rndv_read_done``; that copy is checked per instance), and the order variants
(the encoding is MPI's order). The relations are written apart from the Python engine, so the
test suite cross-checks them against it on random concrete states.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import z3

from verbspec.proofs.report import Obligation
from verbspec.proofs.solving import Limit
from verbspec.proofs.tagmatch.lemma import matches, obligation, solve
from verbspec.spec.tagmatch import lists as tm

ANY = tm.ANY
FIELDS = ("comm", "src", "tag", "bytes", "id", "ord")   # an entry; ord is 0 for receives
# status history values, by id
FRESH, WAITING, MATCHED, CANCELLED = 0, 1, 2, 3

Env = tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef]
_INT = z3.IntSort()


@dataclass(frozen=True)
class Entries:
    """One list: an integer array per field and a length."""

    cols: dict[str, z3.ArrayRef]
    n: z3.ArithRef

    @staticmethod
    def fresh(name: str) -> Entries:
        a = z3.ArraySort(_INT, _INT)
        return Entries({f: z3.Const(f"{name}_{f}", a) for f in FIELDS}, z3.Int(f"{name}_n"))

    def get(self, f: str, i: z3.ArithRef) -> z3.ArithRef:
        return self.cols[f][i]

    def env(self, i: z3.ArithRef) -> Env:
        return self.cols["comm"][i], self.cols["src"][i], self.cols["tag"][i]

    def append(self, vals: dict[str, z3.ArithRef]) -> Entries:
        return Entries({f: z3.Store(a, self.n, vals[f]) for f, a in self.cols.items()},
                       self.n + 1)

    def remove(self, j: z3.ArithRef) -> Entries:
        k = z3.Int("k_rm")
        return Entries({f: z3.Lambda([k], z3.If(k < j, a[k], a[k + 1]))
                        for f, a in self.cols.items()}, self.n - 1)

    def ite(self, cond: z3.BoolRef, other: Entries) -> Entries:
        return Entries({f: z3.If(cond, a, other.cols[f]) for f, a in self.cols.items()},
                       z3.If(cond, self.n, other.n))


@dataclass(frozen=True)
class St:
    """The engine's state with its histories: the posted and unexpected lists, the event
    clock, receive and message status by id, length by id, and each sender's next index."""

    posted: Entries
    unexp: Entries
    t: z3.ArithRef
    rstat: z3.ArrayRef
    mstat: z3.ArrayRef
    length: z3.ArrayRef
    nxt: z3.ArrayRef

    @staticmethod
    def fresh(name: str) -> St:
        a = z3.ArraySort(_INT, _INT)
        return St(Entries.fresh(f"{name}_p"), Entries.fresh(f"{name}_u"), z3.Int(f"{name}_t"),
                  z3.Const(f"{name}_rstat", a), z3.Const(f"{name}_mstat", a),
                  z3.Const(f"{name}_len", a), z3.Const(f"{name}_nxt", a))

    def ite(self, cond: z3.BoolRef, other: St) -> St:
        return St(self.posted.ite(cond, other.posted), self.unexp.ite(cond, other.unexp),
                  z3.If(cond, self.t, other.t), z3.If(cond, self.rstat, other.rstat),
                  z3.If(cond, self.mstat, other.mstat), z3.If(cond, self.length, other.length),
                  z3.If(cond, self.nxt, other.nxt))


@dataclass(frozen=True)
class Obs:
    """What a step made: a match (the pair's ids and envelopes, the message's sender index,
    the truncation it reports), a successful cancel, or a probe's answer (``found``, the
    message id ``mid`` at unexpected index ``pidx``, for the probed envelope ``penv``)."""

    matched: z3.BoolRef
    cancelled: z3.BoolRef
    probed: z3.BoolRef
    found: z3.BoolRef
    rid: z3.ArithRef
    mid: z3.ArithRef
    renv: Env
    menv: Env
    mord: z3.ArithRef
    trunc: z3.BoolRef
    pidx: z3.ArithRef
    penv: Env


@dataclass(frozen=True)
class Args:
    """A step's symbolic arguments: an envelope, a length, a sender index (arrive), an id
    (cancel), and the list index the step picks."""

    env: Env
    nbytes: z3.ArithRef
    ord: z3.ArithRef
    rid: z3.ArithRef
    j: z3.ArithRef

    @staticmethod
    def fresh() -> Args:
        c, s, t, b, o, r, j = z3.Ints("a_c a_s a_t a_b a_o a_r a_j")
        return Args((c, s, t), b, o, r, j)


_F, _Z = z3.BoolVal(False), z3.IntVal(0)
_ZE: Env = (_Z, _Z, _Z)


def _obs(**kw) -> Obs:
    base = dict(matched=_F, cancelled=_F, probed=_F, found=_F, rid=_Z, mid=_Z, renv=_ZE,
                menv=_ZE, mord=_Z, trunc=_F, pidx=_Z, penv=_ZE)
    base.update(kw)
    return Obs(**base)


def first(lst: Entries, j: z3.ArithRef, pred: Callable) -> z3.BoolRef:
    """j is the first index of ``lst`` whose entry satisfies pred (MPI's order)."""
    k = z3.Int("k_first")
    return z3.And(j >= 0, j < lst.n, pred(j),
                  z3.ForAll([k], z3.Implies(z3.And(k >= 0, k < j), z3.Not(pred(k)))))


def last(lst: Entries, j: z3.ArithRef, pred: Callable) -> z3.BoolRef:
    """j is the last index of ``lst`` whose entry satisfies pred (a newest-first search)."""
    k = z3.Int("k_last")
    return z3.And(j >= 0, j < lst.n, pred(j),
                  z3.ForAll([k], z3.Implies(z3.And(k > j, k < lst.n), z3.Not(pred(k)))))


Pick = Callable[[Entries, z3.ArithRef, Callable], z3.BoolRef]


def _none(lst: Entries, pred: Callable) -> z3.BoolRef:
    k = z3.Int("k_none")
    return z3.ForAll([k], z3.Implies(z3.And(k >= 0, k < lst.n), z3.Not(pred(k))))


def _all(lst: Entries, body: Callable, name: str) -> z3.BoolRef:
    k = z3.Int(f"k_{name}")
    return z3.ForAll([k], z3.Implies(z3.And(k >= 0, k < lst.n), body(k)))


def _pairs(lst: Entries, body: Callable, name: str) -> z3.BoolRef:
    i, k = z3.Ints(f"i_{name} k_{name}")
    return z3.ForAll([i, k], z3.Implies(z3.And(i >= 0, i < k, k < lst.n), body(i, k)))


# ---- the steps -------------------------------------------------------------------------------
# Each returns (enabled, post-state, observation): ``enabled`` fixes the step's choice (which
# branch, which index) and holds exactly when the engine can take the step with these arguments.

Step = Callable[[St, Args], tuple[z3.BoolRef, St, Obs]]


def post_recv(s: St, a: Args, pick: Pick = first) -> tuple[z3.BoolRef, St, Obs]:
    """A receive (id ``t``) is posted: it takes the earliest matching unexpected message
    (index j, as ``pick`` chooses), or, when none matches, joins the end of the posted
    list."""
    u, j, rid = s.unexp, a.j, s.t

    def hit(k):
        return matches(a.env, u.env(k))
    take = pick(u, j, hit)
    wait = _none(u, hit)
    length = z3.Store(s.length, rid, a.nbytes)
    mid = u.get("id", j)
    took = St(s.posted, u.remove(j), s.t + 1,
              z3.Store(s.rstat, rid, MATCHED), z3.Store(s.mstat, mid, MATCHED), length, s.nxt)
    entry = dict(zip(FIELDS, (*a.env, a.nbytes, rid, _Z), strict=True))
    waited = St(s.posted.append(entry), u, s.t + 1, z3.Store(s.rstat, rid, WAITING), s.mstat,
                length, s.nxt)
    obs = _obs(matched=take, rid=rid, mid=mid, renv=a.env, menv=u.env(j),
               mord=u.get("ord", j), trunc=u.get("bytes", j) > a.nbytes)
    return z3.Or(take, wait), took.ite(take, waited), obs


def arrive(s: St, a: Args, pick: Pick = first) -> tuple[z3.BoolRef, St, Obs]:
    """A message (id ``t``), the next of its sender, arrives: it takes the earliest matching
    posted receive (index j, as ``pick`` chooses), or joins the end of the unexpected
    list."""
    p, j, mid = s.posted, a.j, s.t
    src = a.env[1]

    def hit(k):
        return matches(p.env(k), a.env)
    take = pick(p, j, hit)
    wait = _none(p, hit)
    ok = z3.And(src >= 0, a.env[2] >= 0, a.ord == s.nxt[src])
    length = z3.Store(s.length, mid, a.nbytes)
    nxt = z3.Store(s.nxt, src, a.ord + 1)
    rid = p.get("id", j)
    took = St(p.remove(j), s.unexp, s.t + 1, z3.Store(s.rstat, rid, MATCHED),
              z3.Store(s.mstat, mid, MATCHED), length, nxt)
    entry = dict(zip(FIELDS, (*a.env, a.nbytes, mid, a.ord), strict=True))
    waited = St(p, s.unexp.append(entry), s.t + 1, s.rstat, z3.Store(s.mstat, mid, WAITING),
                length, nxt)
    obs = _obs(matched=take, rid=rid, mid=mid, renv=p.env(j), menv=a.env, mord=a.ord,
               trunc=a.nbytes > p.get("bytes", j))
    return z3.And(ok, z3.Or(take, wait)), took.ite(take, waited), obs


def cancel(s: St, a: Args) -> tuple[z3.BoolRef, St, Obs]:
    """A cancel of receive ``rid`` removes it while it is posted (index j); otherwise it
    changes nothing (the receive already matched)."""
    p, j = s.posted, a.j
    hit = z3.And(j >= 0, j < p.n, p.get("id", j) == a.rid)
    miss = _none(p, lambda k: p.get("id", k) == a.rid)
    gone = St(p.remove(j), s.unexp, s.t, z3.Store(s.rstat, a.rid, CANCELLED), s.mstat,
              s.length, s.nxt)
    return z3.Or(hit, miss), gone.ite(hit, s), _obs(cancelled=hit, rid=a.rid)


def probe(s: St, a: Args) -> tuple[z3.BoolRef, St, Obs]:
    """A probe names the message a receive with this envelope would take now (index j)."""
    u, j = s.unexp, a.j

    def hit(k):
        return matches(a.env, u.env(k))
    found = first(u, j, hit)
    obs = _obs(probed=z3.BoolVal(True), found=found, mid=u.get("id", j), pidx=j, penv=a.env)
    return z3.Or(found, _none(u, hit)), s, obs


STEPS: dict[str, Step] = {"post_recv": post_recv, "arrive": arrive, "cancel": cancel,
                          "probe": probe}


# ---- the invariants and their strengthenings -------------------------------------------------

def initial(s: St) -> z3.BoolRef:
    x = z3.Int("x_init")
    return z3.And(s.posted.n == 0, s.unexp.n == 0, s.t == 0,
                  z3.ForAll([x], z3.And(s.rstat[x] == FRESH, s.mstat[x] == FRESH,
                                        s.nxt[x] == 0)))


def _well_formed(s: St) -> z3.BoolRef:
    return z3.And(s.posted.n >= 0, s.unexp.n >= 0, s.t >= 0)


def _below_clock(s: St) -> list[z3.BoolRef]:
    return [_all(lst, lambda k, lst=lst: z3.And(lst.get("id", k) >= 0, lst.get("id", k) < s.t),
                 f"clk{n}") for n, lst in (("p", s.posted), ("u", s.unexp))]


def _increasing(s: St) -> list[z3.BoolRef]:
    return [_pairs(lst, lambda i, k, lst=lst: lst.get("id", i) < lst.get("id", k), f"inc{n}")
            for n, lst in (("p", s.posted), ("u", s.unexp))]


def no_matching_pair(s: St) -> z3.BoolRef:
    p, u = s.posted, s.unexp
    i, k = z3.Ints("i_nmp k_nmp")
    return z3.ForAll([i, k], z3.Implies(z3.And(i >= 0, i < p.n, k >= 0, k < u.n),
                                        z3.Not(matches(p.env(i), u.env(k)))))


# Each strengthening is a list of conjuncts: consecution is checked one conjunct at a time,
# since z3's quantifier instantiation settles each alone at once but can stall on all at once.

def strengthen_order(s: St) -> list[z3.BoolRef]:
    return [_well_formed(s), *_below_clock(s), *_increasing(s), no_matching_pair(s)]


def prop_order(pre: St, o: Obs, post: St) -> z3.BoolRef:
    p, u = post.posted, post.unexp
    earlier_recv = _all(p, lambda k: z3.Implies(p.get("id", k) < o.rid,
                                                z3.Not(matches(p.env(k), o.menv))), "ordr")
    earlier_msg = _all(u, lambda k: z3.Implies(u.get("id", k) < o.mid,
                                               z3.Not(matches(o.renv, u.env(k)))), "ordm")
    pu = pre.unexp
    named = z3.And(o.pidx >= 0, o.pidx < pu.n, pu.get("id", o.pidx) == o.mid,
                   matches(o.penv, pu.env(o.pidx)),
                   _all(pu, lambda k: z3.Implies(pu.get("id", k) < o.mid,
                                                 z3.Not(matches(o.penv, pu.env(k)))), "ordp"))
    nothing = _all(pu, lambda k: z3.Not(matches(o.penv, pu.env(k))), "ordn")
    return z3.And(z3.Implies(o.matched, z3.And(earlier_recv, earlier_msg)),
                  z3.Implies(z3.And(o.probed, o.found), named),
                  z3.Implies(z3.And(o.probed, z3.Not(o.found)), nothing))


def strengthen_sender(s: St) -> list[z3.BoolRef]:
    u = s.unexp
    in_order = _pairs(u, lambda i, k: z3.Implies(u.get("src", i) == u.get("src", k),
                                                 u.get("ord", i) < u.get("ord", k)), "snd")
    arrived = _all(u, lambda k: z3.And(u.get("src", k) >= 0,
                                       u.get("ord", k) < s.nxt[u.get("src", k)]), "arr")
    return [_well_formed(s), in_order, arrived, no_matching_pair(s)]


def prop_sender(pre: St, o: Obs, post: St) -> z3.BoolRef:
    u = post.unexp
    return z3.Implies(o.matched, _all(u, lambda k: z3.Implies(
        z3.And(u.get("src", k) == o.menv[1], u.get("ord", k) < o.mord),
        z3.Not(matches(o.renv, u.env(k)))), "ovt"))


def strengthen_once(s: St) -> list[z3.BoolRef]:
    x = z3.Int("x_once")
    p, u = s.posted, s.unexp
    return [_well_formed(s), *_below_clock(s), *_increasing(s),
            _all(p, lambda k: s.rstat[p.get("id", k)] == WAITING, "wr"),
            _all(u, lambda k: s.mstat[u.get("id", k)] == WAITING, "wm"),
            z3.ForAll([x], z3.Implies(x >= s.t, z3.And(s.rstat[x] == FRESH,
                                                       s.mstat[x] == FRESH)))]


def prop_once(pre: St, o: Obs, post: St) -> z3.BoolRef:
    r, m = pre.rstat[o.rid], pre.mstat[o.mid]
    return z3.And(z3.Implies(o.matched, z3.And(r != MATCHED, r != CANCELLED, m != MATCHED)),
                  z3.Implies(o.cancelled, r == WAITING))


def strengthen_length(s: St) -> list[z3.BoolRef]:
    return [_well_formed(s), *_below_clock(s), *(
        _all(lst, lambda k, lst=lst: lst.get("bytes", k) == s.length[lst.get("id", k)],
             f"len{n}") for n, lst in (("p", s.posted), ("u", s.unexp)))]


def prop_length(pre: St, o: Obs, post: St) -> z3.BoolRef:
    return z3.Implies(o.matched, o.trunc == (post.length[o.mid] > post.length[o.rid]))


# invariant name -> (strengthening, the step property, what the induction proves)
PROPERTIES: dict[str, tuple[Callable[[St], list[z3.BoolRef]],
                             Callable[[St, Obs, St], z3.BoolRef], str]] = {
    "mpi_order": (strengthen_order, prop_order,
                  "a match leaves no earlier posted pending receive matching the message and "
                  "no earlier arrived unexpected message matching the receive; a probe names "
                  "the earliest arrived match"),
    "non_overtaking": (strengthen_sender, prop_sender,
                       "a match leaves no earlier unmatched message of the same sender that "
                       "matches the same receive (senders FIFO)"),
    "match_once": (strengthen_once, prop_once,
                   "a receive or message is matched at most once, a cancelled receive never; "
                   "only a pending receive is cancelled"),
    "truncation_reported": (strengthen_length, prop_length,
                            "a match reports truncation exactly when the message is longer "
                            "than the receive's buffer"),
}


# ---- the proof -------------------------------------------------------------------------------

def _all_of(name: str, parts: list[Obligation]) -> Obligation:
    """One obligation made of several queries: proved when each is."""
    bad = [p for p in parts if p.verdict != "proved"]
    verdict = ("proved" if not bad else "violated" if any(p.verdict == "violated" for p in bad)
               else "unknown")
    return Obligation(name, verdict, sum(p.seconds for p in parts),
                      "; ".join(f"{p.name}: {p.verdict} {p.detail}".strip() for p in bad))


def prove_property(name: str, limit: Limit | None = None, steps: dict[str, Step] | None = None,
                   assume: Callable[[St], z3.BoolRef] | None = None) -> list[Obligation]:
    """Base case (the initial state satisfies the strengthening) and one obligation per step
    (from a state satisfying it, the step keeps each conjunct of it and its observation
    satisfies the property); each query is a negation z3 must find unsatisfiable. ``steps``
    replaces the step relations, so a test can show a wrong step is caught; ``assume``
    narrows the steps' pre-states (a test pins one concrete state, where z3 finds a
    counterexample at once rather than searching models of the quantified lists)."""
    strengthen, prop, _ = PROPERTIES[name]
    s, a = St.fresh("s"), Args.fresh()
    base = [obligation(f"conjunct {i}", z3.And(initial(s), z3.Not(c)), limit)
            for i, c in enumerate(strengthen(s))]
    out = [_all_of("base", base)]
    for step, rel in (steps or STEPS).items():
        enabled, post, obs = rel(s, a)
        pre = z3.And(*strengthen(s), enabled, assume(s) if assume else z3.BoolVal(True))
        # a step no state can take would make its obligation hold vacuously: the witness
        # state (or the assumed one) satisfies the strengthening and takes the step
        t0 = time.perf_counter()
        res, why = solve(z3.And(pre, witness(s)) if assume is None else pre, limit)
        taken = Obligation("taken", "proved", time.perf_counter() - t0)
        if res != z3.sat:
            out.append(Obligation(f"step {step}", "unknown", taken.seconds,
                                  why or "no state satisfying the strengthening takes the step"))
            continue
        goals = [(f"conjunct {i}", c) for i, c in enumerate(strengthen(post))]
        goals.append((name, prop(s, obs, post)))
        out.append(_all_of(f"step {step}", [taken, *(obligation(g, z3.And(pre, z3.Not(c)),
                                                            limit) for g, c in goals)]))
    return out


# ---- concrete values, for the cross-check against the Python engine ------------------------

def concrete(lst: Entries, rows: tuple[dict[str, int], ...]) -> z3.BoolRef:
    """Pin a list to concrete entries (each a dict of FIELDS)."""
    cs = [lst.n == len(rows)]
    for i, row in enumerate(rows):
        cs += [lst.cols[f][i] == row[f] for f in FIELDS]
    return z3.And(cs)


def witness(s: St) -> z3.BoolRef:
    """A state every strengthening admits, from which each step can be taken: one posted
    wildcard receive and one unexpected message of another communicator."""
    recv = dict(zip(FIELDS, (0, ANY, ANY, 1, 0, 0), strict=True))
    msg = dict(zip(FIELDS, (1, 0, 0, 1, 1, 0), strict=True))
    return concrete_state(s, (recv,), (msg,), 2, {0: WAITING}, {1: WAITING}, {0: 1, 1: 1},
                          {0: 1})


def table(values: dict[int, int], default: int = 0) -> z3.ArrayRef:
    """A concrete integer array: ``values`` at their keys, ``default`` elsewhere."""
    a = z3.K(_INT, z3.IntVal(default))
    for k, v in values.items():
        a = z3.Store(a, k, v)
    return a


def concrete_state(s: St, posted: tuple[dict[str, int], ...],
                   unexp: tuple[dict[str, int], ...], t: int, rstat: dict[int, int],
                   mstat: dict[int, int], length: dict[int, int], nxt: dict[int, int]
                   ) -> z3.BoolRef:
    """Pin a whole state to concrete values."""
    return z3.And(concrete(s.posted, posted), concrete(s.unexp, unexp), s.t == t,
                  s.rstat == table(rstat), s.mstat == table(mstat),
                  s.length == table(length), s.nxt == table(nxt))
