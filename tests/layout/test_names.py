"""Names are declared once: no action, phase or variant name is written as a string anywhere in
spec/, proofs/ or refimpl/ but where it is declared (tests name what they test, and are not
scanned)."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from verbspec.spec.actions import declared
from verbspec.spec.gate import state as gate_state
from verbspec.spec.gate.steps import GateSpec
from verbspec.spec.gate.variants import VARIANTS as GATE_VARIANTS
from verbspec.spec.tagmatch.system import TagMatchSystem
from verbspec.spec.tagmatch.variants import VARIANTS as TAGMATCH_VARIANTS

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("spec", "proofs", "refimpl")


@dataclass(frozen=True)
class Literal:
    path: str
    line: int
    text: str


def literals(tree: ast.AST, path: str) -> Iterator[Literal]:
    """The string constants of a module, docstrings excepted."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docstrings):
            yield Literal(path, node.lineno, node.value)


def scan(root: Path, dirs: Iterable[str] = SCANNED) -> list[Literal]:
    out = []
    for d in dirs:
        for f in sorted((root / d).rglob("*.py")):
            rel = str(f.relative_to(root))
            out += literals(ast.parse(f.read_text(), rel), rel)
    return out


def retyped(found: list[Literal], names: Iterable[str], declared_once: bool) -> dict[str, list]:
    """Names written more often than allowed: once where ``declared_once`` (the declaration is a
    string), never otherwise (the name comes from an identifier)."""
    allowed = 1 if declared_once else 0
    hits: dict[str, list[Literal]] = {}
    for lit in found:
        hits.setdefault(lit.text, []).append(lit)
    return {n: [f"{h.path}:{h.line}" for h in hits[n]] for n in names
            if len(hits.get(n, ())) > allowed}


def gate_phases() -> list[str]:
    return sorted({v for k, v in vars(gate_state).items()
                   if k.isupper() and isinstance(v, str)} - set(HOMONYMS))


# Words that name an action or phase and also something else: the scan cannot tell the roles
# apart, so these are left out of it (the other role in each case is its own vocabulary).
HOMONYMS = {
    "send": "a completion's opcode (fabric.py) and a tag-matching action beside the gate phase",
    "cancel": "an op of `verbspec match` scenarios and of the offload's hardware queue; a "
              "tag-matching parameter",
    "probe": "an op of `verbspec match` scenarios; a tag-matching parameter",
    "post_recv": "an op of `verbspec match` scenarios and of the tag-matching lemma",
    "timeout": "a verdict (report.py) and a solver answer",
    "init": "the name of a trace's initial step (lts.py)",
    "crashed": "the error text of a crashed rank",
}
ACTIONS = sorted({d.name for cls in (GateSpec, TagMatchSystem) for d in declared(cls)}
                 - set(HOMONYMS))
VARIANT_NAMES = sorted(v.name for v in (*GATE_VARIANTS, *TAGMATCH_VARIANTS))


@pytest.fixture(scope="module")
def tree_literals() -> list[Literal]:
    return scan(ROOT)


def test_action_names_come_only_from_their_step_functions(tree_literals):
    assert ACTIONS
    # an action that is also a phase is declared once, as the phase's constant
    phases = set(gate_phases())
    assert retyped(tree_literals, [a for a in ACTIONS if a not in phases], False) == {}
    assert retyped(tree_literals, [a for a in ACTIONS if a in phases], True) == {}


def test_phase_names_are_declared_once(tree_literals):
    assert len(gate_phases()) > 10
    assert retyped(tree_literals, gate_phases(), True) == {}


def test_variant_names_are_declared_once(tree_literals):
    assert len(VARIANT_NAMES) == 19
    assert retyped(tree_literals, VARIANT_NAMES, True) == {}


def test_the_scan_finds_a_planted_retyping(tmp_path):
    (tmp_path / "spec").mkdir()
    (tmp_path / "spec" / "a.py").write_text('"""doc: no-barrier"""\nX = "no-barrier"\n')
    (tmp_path / "spec" / "b.py").write_text('if "no-barrier" in v:\n    pass\n')
    found = scan(tmp_path, ("spec",))
    assert retyped(found, ["no-barrier"], True) == {"no-barrier": ["spec/a.py:2", "spec/b.py:1"]}
    assert retyped(found, ["reap"], False) == {}


def test_each_action_names_exactly_its_step_arguments(protocol_system):
    for act in protocol_system.actions:
        state, *args = inspect.signature(act.apply).parameters
        assert len(args) == len(act.params), act.name
        assert act.doc and act.doc != act.name, f"{act.name} has no docstring"


def test_the_docs_action_table_lists_exactly_the_gate_actions():
    text = (ROOT / "docs" / "gate.md").read_text()
    table = text[text.index("| action | step |"):]
    table = table[:table.index("\n\n")]
    documented = {m for row in table.splitlines()[2:]
                  for m in re.findall(r"`(\w+)(?:\(|`)", row.split("|")[1] + row.split("|")[2]
                                      if row.split("|")[1].strip() == "faults"
                                      else row.split("|")[1])}
    assert documented == {d.name for d in declared(GateSpec)}
