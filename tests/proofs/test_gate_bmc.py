"""`verbspec check --method bmc` on the gate protocol: every run (faults included) to BMC_DEPTH,
then fault-free runs deeper, then runs with at most one fault deeper, then fault-free random
walks. Each variant the searches reach is refuted with a shortest trace that replays, the one
only the walks reach with a replayable trace that an induction on the z3 model shows a shortest
fault-free run; the base protocol holds; the bound says what each phase covered."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest

from verbspec.proofs.protocols import CHECKS
from verbspec.proofs.run import Options, run_bmc, run_method
from verbspec.proofs.traces import read_moves
from verbspec.refimpl.cli.main import main
from verbspec.spec.gate import system as gate_system
from verbspec.spec.gate.system import VARIANTS, build
from verbspec.spec.lts import Action, Invariant

BMC_DEPTH = CHECKS["gate"].bmc_depth
BMC_WALK_DEPTH = CHECKS["gate"].bmc_walk_depth

# variant -> (invariant, shortest trace length, found by the fault-free phase)
SHORTEST = {
    "no-barrier": ("no_silent_drop", 6, False),
    "signal-last-only": ("send_accounting", 10, False),
    "stray-send-completion": ("send_accounting", 12, False),
    "stray-warm-receive": ("watermark_sound", 12, False),
    "no-seq-check": ("chunk_alignment", 12, False),
    "tag-every-chunk": ("watermark_sound", 15, True),
    "drain-without-rendezvous": ("watermark_sound", 30, True),
}
# variant -> (invariant, trace length): past the searches' budgets, found by the random walks;
# depth-mismatch overruns rank 1's 64 staging receives with a 65-chunk big gate, which takes at
# least 148 steps (65 transmits and 65 deliveries, 18 steps of the two ranks' own), as the
# induction of proofs/gate/bound.py shows
WALKED = {"depth-mismatch": ("no_silent_drop", 148)}
# variant -> (invariant, shortest trace length): needs a fault (a warm-up leftover), found by
# the one-fault phase
ONE_FAULT = {"untagged-in-big-window": ("watermark_sound", 17)}
# variant -> (invariant, shortest trace length): acts only on a verify block (verify_blocks=1),
# found by the fault-free phase
WITH_BLOCKS = {"block-drain-without-rendezvous": ("watermark_sound", 30)}
# variant -> (parameter, invariant, shortest trace length): acts only when rank 1 is built
# apart, found by the first, exhaustive phase
PER_RANK = {"unexchanged-config": ("rank1_max_msg=24576", "chunk_alignment", 12)}


def bmc(capsys, *args: str) -> tuple[int, dict]:
    code = main(["check", "--protocol", "gate", "--method", "bmc", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_every_variant_is_accounted_for():
    assert (set(SHORTEST) | set(WALKED) | set(ONE_FAULT) | set(WITH_BLOCKS) | set(PER_RANK)
            == {v.name for v in VARIANTS})


@pytest.mark.parametrize("variant", list(PER_RANK))
def test_bmc_refutes_a_variant_of_ranks_built_apart(variant, tmp_path, capsys):
    param, invariant, length = PER_RANK[variant]
    # without the variant the ranks' hellos refuse each other: every invariant holds
    code, out = bmc(capsys, "--param", param)
    assert code == 0, out
    code, out = bmc(capsys, "--variant", variant, "--param", param,
                    "--trace-dir", str(tmp_path))
    assert code == 1
    (bad,) = [r for r in out["results"] if r["verdict"] == "violated"]
    assert bad["invariant"] == invariant
    assert bad["bound"].startswith(f"trace of {length} steps, a shortest run: no run of "
                                   f"<= {length - 1} steps")
    meta, moves = read_moves(bad["trace"])
    assert len(moves) == length and meta["params"]["rank1_max_msg"] == 24576
    assert main(["replay", bad["trace"]]) == 1
    assert f"replayed {length} steps: {invariant} violated" in capsys.readouterr().out


@pytest.mark.parametrize("variant", list(WITH_BLOCKS))
def test_bmc_refutes_a_verify_block_variant_without_a_fault(variant, tmp_path, capsys):
    invariant, length = WITH_BLOCKS[variant]
    assert invariant in next(v.breaks for v in VARIANTS if v.name == variant)
    code, out = bmc(capsys, "--variant", variant, "--param", "verify_blocks=1",
                    "--trace-dir", str(tmp_path))
    assert code == 1
    (bad,) = [r for r in out["results"] if r["verdict"] == "violated"]
    assert bad["invariant"] == invariant
    assert bad["bound"].startswith(f"trace of {length} steps, a shortest fault-free run")
    assert f"no fault-free run of <= {length - 1} steps" in bad["bound"]
    meta, moves = read_moves(bad["trace"])
    assert len(moves) == length and "call_block" in [name for name, _ in moves]
    assert meta["params"]["verify_blocks"] == 1
    assert main(["replay", bad["trace"]]) == 1
    assert f"replayed {length} steps: {invariant} violated" in capsys.readouterr().out


@pytest.mark.parametrize("variant", list(SHORTEST))
def test_bmc_refutes_the_variant_with_a_shortest_replayable_trace(variant, tmp_path, capsys):
    invariant, length, fault_free = SHORTEST[variant]
    doc = next(v for v in VARIANTS if v.name == variant)
    assert invariant in doc.breaks          # the invariant the variant documents it breaks
    code, out = bmc(capsys, "--variant", variant, "--trace-dir", str(tmp_path))
    assert code == 1
    (bad,) = [r for r in out["results"] if r["verdict"] == "violated"]
    assert bad["invariant"] == invariant
    assert bad["bound"].startswith(f"trace of {length} steps, ")
    if fault_free:
        assert "a shortest fault-free run" in bad["bound"]
        assert f"no run of any kind of <= {BMC_DEPTH} steps" in bad["bound"]
        assert f"no fault-free run of <= {length - 1} steps" in bad["bound"]
        held = f"; fault-free runs of <= {length - 1} steps ("
    else:
        assert f"a shortest run: no run of <= {length - 1} steps" in bad["bound"]
        assert "fault-free" not in bad["bound"]
        held = f"all runs of <= {length - 1} steps ("
    assert all(held in r["bound"] for r in out["results"] if r["verdict"] == "held")
    meta, moves = read_moves(bad["trace"])
    assert len(moves) == length
    assert meta["violation"] == invariant and meta["variants"] == (variant,)
    # the trace records the parameters as given (faults=1), and replays on them
    assert meta["params"] == build({}).param_dict() and meta["params"]["faults"] == 1
    assert main(["replay", bad["trace"]]) == 1
    assert f"replayed {length} steps: {invariant} violated" in capsys.readouterr().out


def test_base_protocol_holds_under_all_three_phases(tmp_path):
    # defaults, with smaller budgets than the CLI's to keep this test quick
    opts = Options(trace_dir=tmp_path, fault_free_max_states=12_000, one_fault_max_states=12_000,
                   walks=10)
    results = run_method("gate", "bmc", {}, (), opts)
    assert [r.invariant for r in results] == list(gate_system.INVARIANTS)
    assert all(r.verdict == "held" for r in results), [r for r in results if r.verdict != "held"]
    bound = results[0].bound
    first, second, third, fourth = bound.split("; ")
    assert first.startswith(f"all runs of <= {BMC_DEPTH} steps (")
    assert second.startswith("fault-free runs of <= ")
    assert second.endswith("then cut at 12,000 states (fault-free budget)")
    assert int(second.split()[4]) > BMC_DEPTH + 10
    assert third.startswith("runs with at most one fault of <= ")
    assert third.endswith("then cut at 12,000 states (one-fault budget)")
    assert int(third.split()[8]) > BMC_DEPTH + 2
    assert fourth.startswith(f"10 fault-free random walks of <= {BMC_WALK_DEPTH} steps (seed 0, ")
    assert fourth.endswith(" steps) broke nothing")
    assert not list(tmp_path.iterdir())


def test_without_faults_the_deeper_phase_covers_every_run(tmp_path):
    # faults=0: no fault action is enabled short of a deadlock, so fault-free runs are all runs
    # and the deeper phase's violation is a shortest one of all runs
    results = run_method("gate", "bmc", {"faults": 0}, ("tag-every-chunk",),
                         Options(trace_dir=tmp_path))
    (bad,) = [r for r in results if r.verdict == "violated"]
    assert bad.invariant == "watermark_sound"
    assert bad.bound.startswith("trace of 15 steps, a shortest run: no run of <= 14 steps")
    assert "fault-free" not in bad.bound
    meta, moves = read_moves(bad.trace)
    assert len(moves) == 15 and meta["params"]["faults"] == 0


def test_phases_follow_the_bounds(tmp_path):
    system = build({}, ["tag-every-chunk"])
    shallow = run_bmc(system, ("tag-every-chunk",), Options(depth=8, trace_dir=tmp_path), 14,
                      fault_free_depth=14)
    assert all(r.verdict == "held" for r in shallow)
    assert shallow[0].bound.startswith("all runs of <= 8 steps (")
    assert "; fault-free runs of <= 14 steps (" in shallow[0].bound
    # no second phase when the first already covers its depth
    same = run_bmc(system, ("tag-every-chunk",), Options(depth=8, trace_dir=tmp_path), 14,
                   fault_free_depth=8)
    assert all(r.verdict == "held" and "fault-free" not in r.bound for r in same)
    deep = run_bmc(system, ("tag-every-chunk",), Options(depth=8, trace_dir=tmp_path), 14,
                   fault_free_depth=15)
    (bad,) = [r for r in deep if r.verdict == "violated"]
    assert "a shortest fault-free run: no run of any kind of <= 8 steps" in bad.bound


def test_a_protocol_without_a_fault_free_depth_gets_one_phase(tmp_path):

    opts = Options(depth=6, trace_dir=tmp_path)
    results = run_method("tagmatch", "bmc", {}, (), opts)
    assert all(r.verdict in ("held", "proved") for r in results)
    assert all("fault-free" not in r.bound and "one fault" not in r.bound for r in results)


@dataclass(frozen=True)
class _Count:
    n: int = 0
    glitched: bool = False


class _Counter:
    """A toy: n counts up and must not reach 5; a fault can strike once n >= fault_from."""

    protocol = "toy"
    params = None

    def __init__(self, fault_from: int):
        self.actions = (
            Action("inc", "n += 1", (), lambda s: [()] if s.n < 9 else [],
                   lambda s: (replace(s, n=s.n + 1), None)),
            Action("glitch", "a fault", (),
                   lambda s: [()] if s.n >= fault_from and not s.glitched else [],
                   lambda s: (replace(s, glitched=True), None), fault=True),
        )
        self.invariants = (Invariant("below_five", "n < 5", "state",
                                     lambda s: "n is 5" if s.n == 5 else None),)

    def initial(self) -> _Count:
        return _Count()

    def done(self, s: _Count) -> bool:
        return False

    def param_dict(self) -> dict:
        return {}


@pytest.mark.parametrize(("fault_from", "shortest"), [
    (4, "a shortest run: no run of <= 4 steps"),     # runs of <= 4 steps are all fault-free
    (3, "a shortest fault-free run: no run of any kind of <= 2 steps"),
])
def test_fault_free_runs_count_as_all_runs_only_while_no_fault_is_enabled(
        fault_from, shortest, tmp_path):
    results = run_bmc(_Counter(fault_from), (), Options(depth=2, trace_dir=tmp_path), 2,
                      fault_free_depth=10)
    (bad,) = results
    assert bad.verdict == "violated" and bad.bound.startswith(f"trace of 5 steps, {shortest}")


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("variant", list(WALKED))
def test_the_random_walks_refute_what_the_searches_cannot_reach(variant, tmp_path, capsys):
    invariant, length = WALKED[variant]
    assert invariant in next(v.breaks for v in VARIANTS if v.name == variant)
    # smaller search budgets than the CLI's keep this quick; the walks do not depend on them
    code, out = bmc(capsys, "--variant", variant, "--fault-free-max-states", "20000",
                    "--one-fault-max-states", "20000", "--trace-dir", str(tmp_path))
    assert code == 1
    (bad,) = [r for r in out["results"] if r["verdict"] == "violated"]
    assert bad["invariant"] == invariant
    # proofs/gate/bound.py shows no fault-free run that drops a message is shorter
    assert bad["bound"].startswith(f"trace of {length} steps, a shortest fault-free run: no "
                                   f"fault-free run that drops a message is shorter (z3 "
                                   f"induction on the model")
    assert f"at least {length - 1} wherever the next step drops one" in bad["bound"]
    assert "found by fault-free random walk " in bad["bound"]
    assert "until no single step could be deleted" in bad["bound"]
    held = [r["bound"] for r in out["results"] if r["verdict"] == "held"]
    assert held and all(f"broke {invariant} after " in b for b in held)
    meta, moves = read_moves(bad["trace"])
    assert len(moves) == length and meta["violation"] == invariant
    assert not any(m[0] in gate_system.FAULT_ACTIONS for m in moves)
    assert main(["replay", bad["trace"]]) == 1
    assert f"replayed {length} steps: {invariant} violated" in capsys.readouterr().out
    # without the walks the searches hold to their bounds
    code, out = bmc(capsys, "--variant", variant, "--walks", "0", "--max-states", "2000",
                    "--fault-free-max-states", "2000", "--one-fault-max-states", "2000",
                    "--trace-dir", str(tmp_path / "none"))
    assert code == 0 and all(r["verdict"] == "held" for r in out["results"])


@pytest.mark.parametrize("chain_max", [2, 4])
def test_depth_mismatch_is_refuted_with_a_shortest_run_in_small_configurations(chain_max,
                                                                              tmp_path, capsys):
    # at the defaults its run (a 65-chunk big gate) is past the searches; with a small chain cap
    # the overrun takes a (chain_max + 1)-chunk big gate, and breadth-first search finds a
    # shortest run of 18 + 2 * (chain_max + 1) steps: each chunk is transmitted and delivered,
    # plus the ranks' own 18 steps. The walks' 148 steps at the defaults (chain_max 64) fit the
    # same count.
    length = 18 + 2 * (chain_max + 1)
    small = ["--param", "window=2", "--param", "vec_bytes=16384", "--param",
             f"chain_max={chain_max}"]
    code, out = bmc(capsys, "--variant", "depth-mismatch", *small, "--trace-dir", str(tmp_path))
    assert code == 1
    (bad,) = [r for r in out["results"] if r["verdict"] == "violated"]
    assert bad["invariant"] == "no_silent_drop"
    assert bad["bound"].startswith(f"trace of {length} steps, a shortest fault-free run")
    assert main(["replay", bad["trace"]]) == 1
    assert f"replayed {length} steps: no_silent_drop violated" in capsys.readouterr().out


@dataclass(frozen=True)
class _Pair:
    n: int = 0
    kicked: bool = False


class _Kicks:
    """A toy whose state does not record faults: n counts up (inc), a fault may jump it by 2
    (jump) and another fault may kick it (kick); n == 4 once kicked breaks the invariant. With
    three faults that takes 3 steps (jump, jump, kick), with one 5 (inc x4, kick). The state
    (4, not kicked) is reached with one fault (jump, inc, inc) a level before it is reached with
    none, so a search keyed on the state alone would miss the one-fault run."""

    protocol = "toy"
    params = None

    def __init__(self, jump: bool = True):
        self.actions = (
            Action("inc", "n += 1", (), lambda s: [()] if s.n < 9 else [],
                   lambda s: (replace(s, n=s.n + 1), None)),
            Action("jump", "a fault: n += 2", (), lambda s: [()] if jump and s.n < 8 else [],
                   lambda s: (replace(s, n=s.n + 2), None), fault=True),
            Action("kick", "a fault", (), lambda s: [] if s.kicked else [()],
                   lambda s: (replace(s, kicked=True), None), fault=True),
        )
        self.invariants = (Invariant("unkicked_four", "not (kicked and n == 4)", "state",
                                     lambda s: "kicked at 4" if s.kicked and s.n == 4 else None),)

    def initial(self) -> _Pair:
        return _Pair()

    def done(self, s: _Pair) -> bool:
        return False

    def param_dict(self) -> dict:
        return {}


def test_the_one_fault_phase_finds_a_shortest_run_with_at_most_one_fault(tmp_path):
    results = run_bmc(_Kicks(), (), Options(depth=2, trace_dir=tmp_path), 2,
                      fault_free_depth=6, one_fault_depth=8)
    (bad,) = results
    assert bad.verdict == "violated"
    assert bad.bound == ("trace of 5 steps, a shortest run with at most one fault: no run of any "
                         "kind of <= 2 steps (8 states), no fault-free run of <= 6 steps "
                         "(7 states) and no run with at most one fault of <= 4 steps "
                         "(16 states) breaks an invariant")
    meta, moves = read_moves(bad.trace)
    assert [m for m, _ in moves] == ["inc", "inc", "inc", "inc", "kick"]
    # the same state, reached with more faults, is another search node: keyed on states alone
    # the one-fault run above would be lost behind (jump, inc, inc)
    from verbspec.proofs.search import bounded_search

    assert bounded_search(_Kicks(), depth=8, max_faults=1).trace is not None
    assert [s.action for s in bounded_search(_Kicks(), depth=8).trace.steps[1:]] == [
        "jump", "jump", "kick"]                                         # any number of faults


def test_the_one_fault_phase_covers_every_run_while_no_second_fault_is_enabled(tmp_path):
    # without jump, kick is the only fault and can strike once: runs with at most one fault
    # are all the runs, and its violation is a shortest run of any kind
    results = run_bmc(_Kicks(jump=False), (), Options(depth=2, trace_dir=tmp_path), 2,
                      fault_free_depth=6, one_fault_depth=8)
    (bad,) = results
    assert bad.bound.startswith("trace of 5 steps, a shortest run: no run of <= 4 steps breaks "
                                "an invariant (")
    assert bad.bound.endswith("; no second fault action is enabled within them)")


def test_the_one_fault_phase_reports_its_bound_and_budget(tmp_path):
    system = build({}, ["tag-every-chunk"])
    # the fault-free phase stops short of the violation at 15 steps; the one-fault phase finds it
    res = run_bmc(system, ("tag-every-chunk",), Options(depth=8, trace_dir=tmp_path), 14,
                  fault_free_depth=12, one_fault_depth=16)
    (bad,) = [r for r in res if r.verdict == "violated"]
    assert bad.invariant == "watermark_sound"
    assert bad.bound.startswith("trace of 15 steps, a shortest run with at most one fault: no "
                                "run of any kind of <= 8 steps (")
    assert "no fault-free run" not in bad.bound       # the one-fault phase went deeper
    assert "and no run with at most one fault of <= 14 steps (" in bad.bound
    held = [r for r in res if r.verdict == "held"]
    assert all("; fault-free runs of <= 12 steps (" in r.bound for r in held)
    assert all("; runs with at most one fault of <= 14 steps (" in r.bound for r in held)
    cut = run_bmc(system, ("tag-every-chunk",),
                  Options(depth=8, trace_dir=tmp_path, one_fault_max_states=500), 14,
                  fault_free_depth=12, one_fault_depth=16)
    assert all(r.verdict == "held" for r in cut)
    assert cut[0].bound.endswith(", then cut at 500 states (one-fault budget)")
    # no third phase when an earlier one already covers its depth
    none = run_bmc(system, ("tag-every-chunk",), Options(depth=8, trace_dir=tmp_path), 14,
                   fault_free_depth=12, one_fault_depth=8)
    assert all("one fault" not in r.bound for r in none)


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(ONE_FAULT))
def test_bmc_refutes_a_variant_that_needs_a_fault_with_a_shortest_one_fault_run(
        variant, tmp_path, capsys):
    invariant, length = ONE_FAULT[variant]
    assert invariant in next(v.breaks for v in VARIANTS if v.name == variant)
    code, out = bmc(capsys, "--variant", variant, "--trace-dir", str(tmp_path))
    assert code == 1
    (bad,) = [r for r in out["results"] if r["verdict"] == "violated"]
    assert bad["invariant"] == invariant
    assert bad["bound"].startswith(f"trace of {length} steps, a shortest run with at most one "
                                   f"fault: no run of any kind of <= {BMC_DEPTH} steps (")
    assert f"no run with at most one fault of <= {length - 1} steps (" in bad["bound"]
    _, moves = read_moves(bad["trace"])
    assert len(moves) == length and sum(m == "stray_completion" for m, _ in moves) == 1
    assert main(["replay", bad["trace"]]) == 1
