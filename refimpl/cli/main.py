"""The ``verbspec`` command: check the executable specs of two RDMA receive-side protocols (the
gate window and MPI tag matching), replay and draw their traces, run tag-matching scenarios.

Exit codes (a contract for scripts and CI): 0 every invariant proved or held to the stated
bound, 1 a violation (a counterexample trace was written; for ``replay``, the trace ends in a
violation or disagrees with the spec), 2 inconclusive, 3 invalid input, 4 an internal error (a
bug in verbspec, never a verdict about the protocol).

Each command is declared in a module of its own (its arguments and its handler, registry.py's
``Command``); this module lists them, in the order ``verbspec --help`` shows them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from verbspec.refimpl.cli import (
    bench,
    catalogue,
    check,
    conform,
    demo,
    envelope,
    match,
    record,
    registry,
    replay,
    trace,
)
from verbspec.refimpl.cli.registry import Parser, build_parser

COMMANDS = registry.by_name(
    check.COMMAND,
    catalogue.LIST_VARIANTS,
    catalogue.LIST_PROFILES,
    catalogue.LIST_INVARIANTS,
    demo.COMMAND,
    bench.COMMAND,
    catalogue.LIST_PARAMS,
    replay.COMMAND,
    conform.COMMAND,
    match.COMMAND,
    envelope.COMMAND,
    trace.COMMAND,
    trace.VALIDATE,
    record.COMMAND,
)


def parser() -> Parser:
    """``verbspec``'s parser (the commands of more than one word have parsers of their own)."""
    return build_parser(COMMANDS.values())


def main(argv: Sequence[str] | None = None) -> int:
    return registry.main(COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
