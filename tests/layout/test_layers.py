"""Layers only look down, and spec/ is pure.

spec/ (the specs) <- proofs/ (checkers and models) <- refimpl/ (the library, the conformance
suite, the CLI); native/ sits beside proofs/ above spec/. Inside refimpl/ each room is a layer of
its own: engines/ <- bindings/ <- conformance/ <- cli/; engines/ + transport/ <- library/ <-
traces/ (which also reads conformance/); rxe/ uses transport/ and bindings/, never library/;
progress is below every room. A module may import only from its own layer and the layers it
names; spec/ does no I/O (no files, clocks, randomness, solvers or printing); and no modules
import each other in a loop, lazily or not.

The engines (refimpl/engines/) own their behaviour: what they take from spec/ is vocabulary only
(``ENGINE_VOCABULARY``): the configuration's parameters, constants, names, error texts. A slot,
a chunk's length, a window, a depth, a verify-block layer's rows or a match they compute
themselves, so that lockstep conformance holds the spec against a second reading of the
protocol: an engine that called the spec's ``GateConfig.slot`` would agree with a wrong slot
mapping, and no run could catch it.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"spec": "verbspec.spec", "proofs": "verbspec.proofs", "refimpl": "verbspec.refimpl",
           "native": "verbspec.native"}
# refimpl/'s rooms; a module directly in refimpl/ (progress) is below every room
ROOMS = ("engines", "bindings", "transport", "conformance", "library", "traces", "rxe", "cli")
_BELOW_REFIMPL = {"spec", "proofs", "native", "refimpl"}
# what each layer may import from
MAY_IMPORT = {
    "spec": {"spec"},
    "proofs": {"spec", "proofs"},
    "native": {"spec", "native"},
    "refimpl": _BELOW_REFIMPL,
    "refimpl/engines": _BELOW_REFIMPL | {"refimpl/engines"},
    "refimpl/bindings": _BELOW_REFIMPL | {"refimpl/engines", "refimpl/bindings"},
    "refimpl/transport": _BELOW_REFIMPL | {"refimpl/transport"},
    "refimpl/conformance": _BELOW_REFIMPL | {"refimpl/engines", "refimpl/bindings",
                                            "refimpl/conformance"},
    "refimpl/library": _BELOW_REFIMPL | {"refimpl/engines", "refimpl/bindings",
                                        "refimpl/transport", "refimpl/library"},
    "refimpl/traces": _BELOW_REFIMPL | {"refimpl/engines", "refimpl/bindings", "refimpl/transport",
                                       "refimpl/library", "refimpl/conformance",
                                       "refimpl/traces"},
    "refimpl/rxe": _BELOW_REFIMPL | {"refimpl/bindings", "refimpl/transport", "refimpl/rxe"},
    "refimpl/cli": _BELOW_REFIMPL | {f"refimpl/{r}" for r in ROOMS},
}


def layer_of(folder: str, parts: list[str]) -> str:
    """The layer of a module: its top folder, or the refimpl/ room it is in."""
    if folder != "refimpl" or parts[:1] == [] or parts[0] not in ROOMS:
        return folder
    return f"refimpl/{parts[0]}"
IMPURE_MODULES = {"os", "io", "sys", "pathlib", "shutil", "tempfile", "subprocess", "socket",
                  "time", "random", "threading", "multiprocessing", "z3", "hypothesis",
                  "rich"}
IMPURE_CALLS = {"open", "print", "input"}


@dataclass(frozen=True)
class Module:
    name: str
    folder: str
    path: Path
    tree: ast.Module
    rel: str = ""           # the path from the tree's root, as violations name it


def modules(root: Path) -> dict[str, Module]:
    out = {}
    for folder, package in FOLDERS.items():
        for f in sorted((root / folder).rglob("*.py")):
            parts = list(f.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            out[name] = Module(name, layer_of(folder, parts), f,
                               ast.parse(f.read_text(), str(f)), str(f.relative_to(root)))
    return out


def imports(mod: Module) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import in the module, at any depth."""
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for a in node.names:
                yield node.lineno, f"{node.module}.{a.name}"


def internal_edges(mods: dict[str, Module]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m in mods.values():
        for _, target in imports(m):
            if target in mods and target != m.name:
                graph[m.name].add(target)
    return graph


def layer_violations(mods: dict[str, Module]) -> list[str]:
    bad = []
    folder_of = {m.name: m.folder for m in mods.values()}
    for m in mods.values():
        for line, target in imports(m):
            if target in folder_of and folder_of[target] not in MAY_IMPORT[m.folder]:
                bad.append(f"{m.rel}"
                           f":{line} imports {target} ({folder_of[target]}/ is above "
                           f"{m.folder}/)")
    return bad


def impurities(mods: dict[str, Module]) -> list[str]:
    bad = []
    for m in mods.values():
        if m.folder != "spec":
            continue
        for line, target in imports(m):
            if target.split(".")[0] in IMPURE_MODULES:
                bad.append(f"{m.name}:{line} imports {target}")
        for node in ast.walk(m.tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in IMPURE_CALLS):
                bad.append(f"{m.name}:{node.lineno} calls {node.func.id}()")
    return bad


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import loops: strongly connected components of more than one module (Tarjan).
    A package's __init__ importing its own modules is not a loop of theirs."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


# ------------------------------------------------------------------ what engines take from spec/
def _fields(module: str, name: str) -> frozenset[str]:
    """The dataclass fields of a spec type: for a configuration, its parameters themselves."""
    return frozenset(f.name for f in dataclasses.fields(getattr(importlib.import_module(module),
                                                                name)))


@dataclass(frozen=True)
class Vocabulary:
    """What an engine may take from one spec module: its upper-case names (constants, phase and
    status names, error texts, variant records) but those that are behaviour (a phase graph, a
    table of what a phase does, a matching order), and the types it may name, each with the
    attributes an engine may read of a value of it. A constant's attributes are refused but
    for ``constant_attrs``."""

    constants: bool = True
    behaviour: frozenset[str] = frozenset()
    types: Mapping[str, frozenset[str]] = field(default_factory=dict)
    constant_attrs: frozenset[str] = frozenset()

    def allows(self, name: str) -> bool:
        return name in self.types or (self.constants and name.isupper()
                                      and name not in self.behaviour)


# The one place that says what engines share with the spec. Anything else an engine imports or
# reads of spec/ (a function, a step, a configuration's method or derived property such as
# GateConfig.slot, chunk_len, chunks, big_window, big_send_depth, block_wrs) is refused: it is
# behaviour, which each engine computes in its own code.
ENGINE_VOCABULARY: dict[str, Vocabulary] = {
    # the gate's parameters, read as values
    "verbspec.spec.gate.params": Vocabulary(
        constants=False,
        types={"GateConfig": _fields("verbspec.spec.gate.params", "GateConfig")}),
    # the registered buffers' names and the poll sizes
    "verbspec.spec.gate.constants": Vocabulary(),
    # wr_id tags and the side channel's items (describe(): how an error text names one)
    "verbspec.spec.gate.wire": Vocabulary(types={
        "Hello": _fields("verbspec.spec.gate.wire", "Hello"),
        "TcpItem": _fields("verbspec.spec.gate.wire", "TcpItem") | {"describe"}}),
    # phase names and the header and barrier constants, not the phase graph or its phase sets
    "verbspec.spec.gate.state": Vocabulary(behaviour=frozenset({
        "NEXT_PHASES", "REAP_PHASES", "TCP_READ_PHASES", "BIG_PHASES", "BLOCK_PHASES",
        "DEAD_PHASES"})),
    # ds4's error texts and errnos, each called with its values; not which wait fails how
    "verbspec.spec.gate.errors": Vocabulary(behaviour=frozenset({"WAITS"})),
    # the variants' names
    "verbspec.spec.gate.variants": Vocabulary(constant_attrs=frozenset({"name"})),
    # tag matching: its parameters, status and stage names, ANY, the receive locations; not
    # the matching order
    "verbspec.spec.tagmatch.state": Vocabulary(
        types={"Params": _fields("verbspec.spec.tagmatch.state", "Params")}),
    "verbspec.spec.tagmatch.lists": Vocabulary(behaviour=frozenset({"MPI_RULES"})),
    "verbspec.spec.tagmatch.offload": Vocabulary(behaviour=frozenset({"NOTHING"})),
    "verbspec.spec.tagmatch.variants": Vocabulary(constant_attrs=frozenset({"name"})),
}
SPEC_PACKAGE = "verbspec.spec"
_NOTHING = Vocabulary(constants=False)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _spec_modules(root: Path = ROOT) -> frozenset[str]:
    """The spec's modules and packages by dotted name."""
    out = {SPEC_PACKAGE}
    for f in (root / "spec").rglob("*.py"):
        parts = list(f.relative_to(root / "spec").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.add(".".join([SPEC_PACKAGE, *parts]))
    return frozenset(out)


def _shared(module: str) -> bool:
    """A spec module engines may import, or a package on the way to one."""
    return module in ENGINE_VOCABULARY or any(v.startswith(module + ".")
                                              for v in ENGINE_VOCABULARY)


@dataclass(frozen=True)
class _Ref:
    """What an expression is, as far as spec/ goes: a module or package (``module``), a name
    imported from one (``name``: a constant or a type), or a value of spec types (``types``:
    (module, type) pairs, more than one where engines give a field of one name two types)."""

    module: str = ""
    name: str = ""
    types: frozenset[tuple[str, str]] = frozenset()


def _type_ref(ref: _Ref | None) -> _Ref | None:
    """The value of the type ``ref`` names, if it names one of the vocabulary's types."""
    if ref is None or ref.types or not ref.name:
        return None
    if ref.name in ENGINE_VOCABULARY.get(ref.module, _NOTHING).types:
        return _Ref(types=frozenset({(ref.module, ref.name)}))
    return None


def _merge(a: _Ref | None, b: _Ref) -> _Ref:
    return b if a is None else _Ref(types=a.types | b.types)


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """A statement's nodes, not those of the functions and classes it defines."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (*_FUNCTIONS, ast.ClassDef)):
            yield from _own_nodes(child)


class _Borrowings:
    """One engine module's use of spec/, judged against ENGINE_VOCABULARY."""

    def __init__(self, mod: Module, spec_modules: frozenset[str]):
        self.mod, self.spec_modules = mod, spec_modules
        self.bound: dict[str, _Ref] = {}        # names the module's spec imports bind
        self.fields: dict[str, _Ref] = {}       # self.<field> of a spec type, every engine's
        self.bad: list[str] = []

    def refuse(self, line: int, what: str, source: str) -> None:
        self.bad.append(f"{self.mod.rel}:{line} takes {what} from the spec ({source}): not "
                        f"the vocabulary engines share with it (ENGINE_VOCABULARY)")

    # -------------------------------------------------------------- imports
    def imports(self) -> None:
        for node in ast.walk(self.mod.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] != SPEC_PACKAGE.split(".")[0]:
                        continue
                    if a.name.startswith(SPEC_PACKAGE) and not _shared(a.name):
                        self.refuse(node.lineno, a.name, f"import {a.name}")
                    top = a.name if a.asname else a.name.split(".")[0]
                    self.bound[a.asname or top] = _Ref(module=top)
            elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                  and node.module.startswith(SPEC_PACKAGE)):
                for a in node.names:
                    full, source = f"{node.module}.{a.name}", f"from {node.module} import {a.name}"
                    if full in self.spec_modules:
                        if not _shared(full):
                            self.refuse(node.lineno, full, source)
                        self.bound[a.asname or a.name] = _Ref(module=full)
                    else:
                        if not ENGINE_VOCABULARY.get(node.module, _NOTHING).allows(a.name):
                            self.refuse(node.lineno, full, source)
                        self.bound[a.asname or a.name] = _Ref(node.module, a.name)

    def annotated(self, annotation: ast.expr | None) -> _Ref | None:
        """The spec type an annotation names (``Hello | None``: Hello), if any."""
        for n in ast.walk(annotation) if annotation is not None else ():
            ref = _type_ref(self.bound.get(n.id)) if isinstance(n, ast.Name) else None
            if ref is not None:
                return ref
        return None

    def declared_fields(self) -> dict[str, _Ref]:
        """Fields the module's classes give a spec type: annotated (``cfg: GateConfig``), or
        set from a parameter that is (``self.cfg = cfg``)."""
        out: dict[str, _Ref] = {}
        for node in ast.walk(self.mod.tree):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    ref = (self.annotated(stmt.annotation) if isinstance(stmt, ast.AnnAssign)
                           and isinstance(stmt.target, ast.Name) else None)
                    if ref is not None:
                        out[stmt.target.id] = _merge(out.get(stmt.target.id), ref)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = {a.arg: self.annotated(a.annotation) for a in node.args.args}
                for n in ast.walk(node):
                    if (isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
                            and params.get(n.value.id) is not None):
                        for t in n.targets:
                            if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                                    and t.value.id == "self"):
                                out[t.attr] = _merge(out.get(t.attr), params[n.value.id])
        return out

    # -------------------------------------------------------------- what an expression is
    def resolve(self, e: ast.expr, scope: dict[str, _Ref]) -> _Ref | None:
        if isinstance(e, ast.Name):
            return scope[e.id] if e.id in scope else self.bound.get(e.id)
        if not isinstance(e, ast.Attribute):
            return None
        if isinstance(e.value, ast.Name) and e.value.id == "self":
            return self.fields.get(e.attr)
        base = self.resolve(e.value, scope)
        if base is None or not base.module or base.name:
            return None         # a constant's or a value's attribute: checked, not followed
        full = f"{base.module}.{e.attr}"
        if full in self.spec_modules:
            return _Ref(module=full)
        return _Ref(base.module, e.attr) if base.module in self.spec_modules else None

    def check(self, line: int, base: _Ref, attr: str, source: str) -> None:
        """Reading ``attr`` of what ``base`` is."""
        if base.types:
            if not any(attr in ENGINE_VOCABULARY[m].types[t] for m, t in base.types):
                names = " or ".join(sorted(t for _, t in base.types))
                self.refuse(line, f"{names}.{attr}", source)
        elif base.name:
            vocab = ENGINE_VOCABULARY.get(base.module, _NOTHING)
            allowed = vocab.types.get(base.name, vocab.constant_attrs)
            if _shared(base.module) and attr not in allowed:
                self.refuse(line, f"{base.name}.{attr}", source)
        else:
            full = f"{base.module}.{attr}"
            if full in self.spec_modules:
                if not _shared(full):
                    self.refuse(line, full, source)
            elif (base.module in ENGINE_VOCABULARY
                  and not ENGINE_VOCABULARY[base.module].allows(attr)):
                self.refuse(line, full, source)

    # -------------------------------------------------------------- scopes
    def scope_of(self, fn: ast.AST, outer: dict[str, _Ref]) -> dict[str, _Ref]:
        """The names a function, lambda or the module binds to spec values: parameters
        annotated with a spec type or named as a spec-typed field (``cfg``), and names
        assigned from a spec value (tuples pairwise)."""
        scope = dict(outer)
        if isinstance(fn, _FUNCTIONS):
            a = fn.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                ref = self.annotated(arg.annotation) or self.fields.get(arg.arg)
                if ref is not None:
                    scope[arg.arg] = ref
                else:
                    scope.pop(arg.arg, None)
        body = [fn.body] if isinstance(fn, ast.Lambda) else getattr(fn, "body", [])
        for _ in range(2):      # a name assigned from one assigned further down
            for n in (n for stmt in body for n in _own_nodes(stmt)):
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                    ref = self.annotated(n.annotation)
                    if ref is not None:
                        scope[n.target.id] = ref
                elif isinstance(n, ast.Assign):
                    for t in n.targets:
                        self._bind(t, n.value, scope)
        return scope

    def _bind(self, target: ast.expr, value: ast.expr, scope: dict[str, _Ref]) -> None:
        if (isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
                and len(target.elts) == len(value.elts)):
            for t, v in zip(target.elts, value.elts, strict=True):
                self._bind(t, v, scope)
        elif isinstance(target, ast.Name):
            ref = self.resolve(value, scope)
            if ref is not None and ref.types:
                scope[target.id] = ref

    def walk(self, node: ast.AST, scope: dict[str, _Ref]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = self.scope_of(child, scope) if isinstance(child, _FUNCTIONS) else scope
            if isinstance(child, ast.Attribute):
                base = self.resolve(child.value, inner)
                if base is not None:
                    self.check(child.lineno, base, child.attr, ast.unparse(child))
            elif (isinstance(child, ast.Call) and isinstance(child.func, ast.Name)
                  and child.func.id in ("getattr", "hasattr") and len(child.args) > 1):
                base, name = self.resolve(child.args[0], inner), child.args[1]
                if base is None:
                    pass
                elif isinstance(name, ast.Constant) and isinstance(name.value, str):
                    self.check(child.lineno, base, name.value, ast.unparse(child))
                else:
                    self.refuse(child.lineno, "an attribute named at run time",
                                ast.unparse(child))
            self.walk(child, inner)


def spec_borrowings(mods: dict[str, Module], spec_modules: frozenset[str] | None = None
                    ) -> list[str]:
    """What the engines (refimpl/engines/) take from spec/ beyond ENGINE_VOCABULARY: imports
    of anything else, and reads (attributes, getattr) of spec modules, of names imported from
    them and of values of spec types (a configuration as ``self.cfg``, as a local bound to it,
    or as a parameter annotated with its type or named as its field)."""
    checkers = [_Borrowings(m, spec_modules or _spec_modules())
                for m in mods.values() if m.folder == "refimpl/engines"]
    fields: dict[str, _Ref] = {}
    for b in checkers:
        b.imports()
        for name, ref in b.declared_fields().items():
            fields[name] = _merge(fields.get(name), ref)
    bad = []
    for b in checkers:
        b.fields = fields
        b.walk(b.mod.tree, b.scope_of(b.mod.tree, {}))
        bad += b.bad
    return bad


def test_imports_only_look_down():
    assert layer_violations(modules(ROOT)) == []


def test_spec_does_no_io():
    assert impurities(modules(ROOT)) == []


def test_no_import_loops():
    assert cycles(internal_edges(modules(ROOT))) == []


def _plant(tmp_path: Path, files: dict[str, str]) -> dict[str, Module]:
    for folder in FOLDERS:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    return modules(tmp_path)


def test_a_planted_upward_import_impurity_and_loop_are_found(tmp_path):
    mods = _plant(tmp_path, {
        "spec/a.py": "from verbspec.proofs import b\n",
        "proofs/b.py": "def f():\n    from verbspec.refimpl import c\n",
        "refimpl/c.py": "import verbspec.spec.a\n",
        "spec/d.py": "import os\n\n\ndef g(p):\n    return open(p)\n",
    })
    assert [v.split(" imports ")[1] for v in layer_violations(mods)] == [
        "verbspec.proofs (proofs/ is above spec/)",
        "verbspec.proofs.b (proofs/ is above spec/)",
        "verbspec.refimpl (refimpl/ is above proofs/)",
        "verbspec.refimpl.c (refimpl/ is above proofs/)"]
    assert impurities(mods) == ["verbspec.spec.d:1 imports os", "verbspec.spec.d:5 calls open()"]
    assert cycles(internal_edges(mods)) == [
        ["verbspec.proofs.b", "verbspec.refimpl.c", "verbspec.spec.a"]]


def test_a_room_that_imports_upward_is_refused(tmp_path):
    for room in ("library", "cli", "rxe", "engines"):
        (tmp_path / "refimpl" / room).mkdir(parents=True)
        (tmp_path / "refimpl" / room / "__init__.py").write_text("")
    mods = _plant(tmp_path, {
        "refimpl/library/channel.py": "from verbspec.refimpl.cli import main\n",
        "refimpl/cli/main.py": "from verbspec.refimpl.library import channel\n",
        "refimpl/rxe/guest.py": "from verbspec.refimpl.library import channel\n",
        "refimpl/engines/gate.py": "import verbspec.spec\n",
    })
    assert [v.split(" imports ")[1] for v in layer_violations(mods)] == [
        "verbspec.refimpl.cli (refimpl/cli/ is above refimpl/library/)",
        "verbspec.refimpl.cli.main (refimpl/cli/ is above refimpl/library/)",
        "verbspec.refimpl.library (refimpl/library/ is above refimpl/rxe/)",
        "verbspec.refimpl.library.channel (refimpl/library/ is above refimpl/rxe/)"]


def test_every_refimpl_module_is_in_a_room():
    loose = [m.path.name for m in modules(ROOT).values()
             if m.folder == "refimpl" and m.path.name != "__init__.py"]
    assert loose == ["progress.py"]


def test_engines_take_only_the_spec_vocabulary():
    assert spec_borrowings(modules(ROOT)) == []


BORROWING_ENGINE = '''\
from verbspec.spec.gate import errors, steps
from verbspec.spec.gate.params import GateConfig, make_config
from verbspec.spec.gate.state import IDLE, NEXT_PHASES
from verbspec.spec.tagmatch.lists import ANY, find_recv
import verbspec.spec.gate.system as system


class Engine:
    cfg: GateConfig
    phase: str = IDLE

    def gate(self, seq: int) -> int:
        c, wild = self.cfg, ANY
        return c.slot(seq) + self.cfg.chunk_len(0) + c.window + wild

    def window(self, cfg, depth: int) -> int:
        return GateConfig.big_window(cfg, depth) + getattr(cfg, "big_depth")

    def fail(self, seq: int) -> str:
        return errors.GATE_ORDER(layer=0, gate=0, seq=seq) + errors.documented("x").name
'''


def test_an_engine_that_borrows_behaviour_from_the_spec_is_refused(tmp_path):
    (tmp_path / "refimpl" / "engines").mkdir(parents=True)
    (tmp_path / "refimpl" / "engines" / "__init__.py").write_text("")
    mods = _plant(tmp_path, {"refimpl/engines/borrowing.py": BORROWING_ENGINE})
    head, tail = "refimpl/engines/borrowing.py:", (
        ": not the vocabulary engines share with it (ENGINE_VOCABULARY)")
    bad = spec_borrowings(mods)
    assert all(v.startswith(head) and v.endswith(tail) for v in bad)
    assert [v[len(head):-len(tail)].replace(" takes", "") for v in bad] == [
        "1 verbspec.spec.gate.steps from the spec (from verbspec.spec.gate import steps)",
        "2 verbspec.spec.gate.params.make_config from the spec "
        "(from verbspec.spec.gate.params import make_config)",
        "3 verbspec.spec.gate.state.NEXT_PHASES from the spec "
        "(from verbspec.spec.gate.state import NEXT_PHASES)",
        "4 verbspec.spec.tagmatch.lists.find_recv from the spec "
        "(from verbspec.spec.tagmatch.lists import find_recv)",
        "5 verbspec.spec.gate.system from the spec (import verbspec.spec.gate.system)",
        "14 GateConfig.slot from the spec (c.slot)",
        "14 GateConfig.chunk_len from the spec (self.cfg.chunk_len)",
        "17 GateConfig.big_window from the spec (GateConfig.big_window)",
        "20 verbspec.spec.gate.errors.documented from the spec (errors.documented)"]
    # the same engine, its behaviour its own: nothing refused
    own = "\n".join(line for line in BORROWING_ENGINE.splitlines()
                    if "steps" not in line and "system" not in line)
    for borrowed, owned in (("GateConfig, make_config", "GateConfig"),
                            ("IDLE, NEXT_PHASES", "IDLE"), ("ANY, find_recv", "ANY"),
                            ("c.slot(seq) + self.cfg.chunk_len(0)", "c.n_slots + c.max_msg"),
                            ("GateConfig.big_window(cfg, depth)", "min(depth, cfg.big_depth)"),
                            (' + errors.documented("x").name', "")):
        own = own.replace(borrowed, owned)
    (tmp_path / "refimpl" / "engines" / "borrowing.py").write_text(own)
    assert spec_borrowings(modules(tmp_path)) == []
