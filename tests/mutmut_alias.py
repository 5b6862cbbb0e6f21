"""A pytest plugin for the mutation run (pyproject's ``[tool.mutmut]``,
docs/conformance-internals.md):
mutmut copies the two reference engines to ``mutants/refimpl/engines/`` and names each mutant by
that path (``refimpl.engines.gate_engine...``), while the suite imports them as
``verbspec.refimpl.engines.*``. Loaded
with ``-p tests.mutmut_alias`` before anything imports the engines, it imports the mutated
copies under mutmut's names and makes ``verbspec.refimpl.engines.gate_engine`` and
``verbspec.refimpl.engines.tagmatch_engine`` those modules."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import verbspec.refimpl.engines as package

ENGINES = ("gate_engine", "tagmatch_engine")

for _name in ENGINES:
    _full = f"{package.__name__}.{_name}"
    if _full in sys.modules:
        raise RuntimeError(f"{_full} was imported before the mutation run's alias")
    _module = importlib.import_module(f"refimpl.engines.{_name}")
    if Path(_module.__file__).resolve().parents[2].name != "mutants":
        raise RuntimeError(f"refimpl.engines.{_name} is {_module.__file__}, "
                           "not mutmut's copy in mutants/: "
                           "this plugin is for `mutmut run` only")
    sys.modules[_full] = _module
    setattr(package, _name, _module)
