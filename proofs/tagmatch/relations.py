"""The z3 step relations of the matching proofs (proofs/tagmatch/matching.py) held against
the executable list engine (spec/tagmatch/lists.py): on random engine states, each step's
relation admits exactly the successor the engine computes. The inductions are about the
relations; they say something of the spec only while this holds, so the prover runs it first
(a pass is remembered under a digest of the three sources) and a disagreement voids them."""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import z3

from verbspec.proofs.tagmatch import matching as mz
from verbspec.spec.tagmatch import lists as tm

TRIALS, SEED = 160, 5      # random states, a quarter for each step (post, arrive, cancel, probe)
KINDS = ("post_recv", "arrive", "cancel", "probe")


@dataclass(frozen=True)
class Agreement:
    """The check's outcome: the trials run, and the first disagreement (None: none)."""

    trials: int
    seconds: float
    disagreement: str | None = None
    cached: bool = False

    @property
    def coverage(self) -> str:
        how = "remembered" if self.cached else f"{self.seconds:.1f} s"
        return (f"the step relations admit exactly the list engine's successor on {self.trials} "
                f"random states ({how})")


def _env(rng: random.Random, wild: bool) -> tuple[int, int, int]:
    return (rng.randrange(2), tm.ANY if wild and rng.random() < 0.3 else rng.randrange(3),
            tm.ANY if wild and rng.random() < 0.3 else rng.randrange(3))


def _lists(rng: random.Random) -> tuple[int, tuple, tuple, dict[int, int], dict[int, int]]:
    """A random engine state: ids from one clock, each list in id order; message sender
    indexes increasing per sender."""
    t = rng.randrange(9)
    ids = list(range(t))
    rng.shuffle(ids)
    cut = rng.randrange(t + 1)
    posted = tuple(tm.Recv(i, *_env(rng, True), rng.randrange(1, 4)) for i in sorted(ids[:cut]))
    unexp = tuple(tm.Msg(i, *_env(rng, False), rng.randrange(1, 4)) for i in sorted(ids[cut:]))
    ords: dict[int, int] = {}
    nxt: dict[int, int] = {}
    for m in unexp:
        ords[m.id] = nxt.get(m.src, 0) + rng.randrange(2)
        nxt[m.src] = ords[m.id] + 1
    return t, posted, unexp, ords, nxt


def _rows(items: tuple, ords: dict[int, int]) -> tuple[dict[str, int], ...]:
    return tuple({"comm": x.comm, "src": x.src, "tag": x.tag, "bytes": x.bytes, "id": x.id,
                  "ord": ords.get(x.id, 0)} for x in items)


def _sat(*fs: Any) -> z3.CheckSatResult:
    s = z3.Solver()
    s.add(*fs)
    return s.check()


def _trial(rng: random.Random, kind: str, s: mz.St, a: mz.Args) -> str | None:
    """One random state and step: None when the relation admits exactly the engine's
    successor, else what differs."""
    t, posted, unexp, ords, nxt = _lists(rng)
    e = tm.Engine(posted, unexp)
    lengths = {x.id: x.bytes for x in (*posted, *unexp)}
    pre = mz.concrete_state(s, _rows(posted, ords), _rows(unexp, ords), t,
                            {r.id: mz.WAITING for r in posted},
                            {m.id: mz.WAITING for m in unexp}, lengths, nxt)
    nb = rng.randrange(1, 4)
    match = found = None
    ok = False
    if kind == "post_recv":
        env = _env(rng, True)
        post, match = tm.post_recv(e, tm.Recv(t, *env, nb))
        enabled, st, obs = mz.post_recv(s, a)
    elif kind == "arrive":
        env = _env(rng, False)
        ords[t] = nxt.get(env[1], 0)
        post, match = tm.arrive(e, tm.Msg(t, *env, nb))
        enabled, st, obs = mz.arrive(s, a)
        pre = z3.And(pre, a.ord == ords[t])
    elif kind == "cancel":
        env = (0, 0, 0)
        rid = rng.randrange(t + 1)
        post, ok = tm.cancel(e, rid)
        enabled, st, obs = mz.cancel(s, a)
        pre = z3.And(pre, a.rid == rid)
    else:
        env = _env(rng, True)
        post, found = e, tm.probe(e, *env)
        enabled, st, obs = mz.probe(s, a)
    pre = z3.And(pre, *(x == v for x, v in zip(a.env, env, strict=True)), a.nbytes == nb)
    want = [mz.concrete(st.posted, _rows(post.posted, ords)),
            mz.concrete(st.unexp, _rows(post.unexpected, ords))]
    if kind in ("post_recv", "arrive"):
        stat = st.rstat if kind == "post_recv" else st.mstat
        want += [st.t == t + 1, obs.matched == (match is not None), st.length[t] == nb]
        if match is not None:
            want += [obs.rid == match.recv.id, obs.mid == match.msg.id,
                     obs.trunc == match.truncated, st.rstat[match.recv.id] == mz.MATCHED,
                     st.mstat[match.msg.id] == mz.MATCHED]
        else:
            want += [stat[t] == mz.WAITING]
        if kind == "arrive":
            want += [st.nxt[env[1]] == ords[t] + 1]
    elif kind == "cancel":
        want += [obs.cancelled == ok, st.t == t]
        if ok:
            want += [st.rstat[rid] == mz.CANCELLED]
    else:
        want += [obs.found == (found is not None)]
        if found is not None:
            want += [obs.mid == found.id]
    where = f"{kind} from posted {list(posted)}, unexpected {list(unexp)}, envelope {env}"
    if _sat(pre, enabled, *want) != z3.sat:
        return f"the relation does not admit the list engine's successor: {where}"
    if _sat(pre, enabled, z3.Not(z3.And(want))) != z3.unsat:
        return f"the relation admits a successor the list engine does not compute: {where}"
    return None


def source_digest() -> str:
    """A digest of the relations, the list engine and this check."""
    h = hashlib.sha256()
    for mod in (mz, tm):
        h.update(Path(mod.__file__).read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    """Where passing checks are remembered: $VERBSPEC_CACHE, else ~/.cache/verbspec (as the
    gate's refinement check)."""
    env = os.environ.get("VERBSPEC_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "verbspec"


def check(trials: int = TRIALS, seed: int = SEED, cache: Path | None = None) -> Agreement:
    """The relations against the list engine on ``trials`` random states; with ``cache``, a
    pass is remembered there under the source digest and read back instead."""
    key = hashlib.sha256(json.dumps([source_digest(), trials, seed]).encode()).hexdigest()[:16]
    path = cache / f"tagmatch-relations-{key}.json" if cache is not None else None
    if path is not None and path.is_file():
        try:
            kept = json.loads(path.read_text())
            return Agreement(kept["trials"], kept["seconds"], None, cached=True)
        except (OSError, ValueError, KeyError):
            pass
    t0 = time.perf_counter()
    rng = random.Random(seed)
    s, a = mz.St.fresh("s"), mz.Args.fresh()
    for n in range(trials):
        bad = _trial(rng, KINDS[n % len(KINDS)], s, a)
        if bad is not None:
            return Agreement(n + 1, time.perf_counter() - t0, f"trial {n + 1}: {bad}")
    done = Agreement(trials, time.perf_counter() - t0)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"trials": trials, "seconds": done.seconds}))
        except OSError:
            pass            # unwritable cache: checked again next time
    return done
