"""Layers only look down, and spec/ is pure.

spec/ (the specs) <- proofs/ (checkers and models) <- refimpl/ (the library, the conformance
suite, the CLI); native/ sits beside proofs/ above spec/. Inside refimpl/ each room is a layer of
its own: engines/ <- bindings/ <- conformance/ <- cli/; engines/ + transport/ <- library/ <-
traces/ (which also reads conformance/); rxe/ uses transport/ and bindings/, never library/;
progress is below every room. A module may import only from its own layer and the layers it
names; spec/ does no I/O (no files, clocks, randomness, solvers or printing); and no modules
import each other in a loop, lazily or not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
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
