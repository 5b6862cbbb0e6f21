"""The commands of ``verbspec`` and how they are run. Each command is a ``Command``, declared in
a module of its own: its name, its one line of help (also its description), the function that
declares its arguments on its parser, its handler, which returns the exit code, and its aliases,
if any. ``main`` builds the parser from the commands, parses, runs the handler and maps what it
raises to the exit codes: 3 for invalid input, usage errors included (argparse's own 2 would
read as "inconclusive"), 4 for anything else, an internal error (``--debug`` adds the
traceback)."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from verbspec.proofs.report import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK
from verbspec.refimpl.cli.inputs import InputError
from verbspec.refimpl.cli.report import reader_gone
from verbspec.spec.itf import TraceFormatError
from verbspec.spec.params import ParamError

DESCRIPTION = ("Check executable specs of RDMA receive-side protocols (gate window, MPI tag "
               "matching): prove, bounded-check or explore their invariants; replay and draw "
               "counterexample traces; run tag-matching scenarios.")

EPILOG = """exit codes:
  0  every invariant proved or held to the stated bound (other commands: success)
  1  a violation: a counterexample trace was written (replay: the trace ends in a
     violation, or disagrees with the spec)
  2  inconclusive: a method could not decide
  3  invalid input: bad arguments, parameters, files or output paths
  4  internal error: a bug in verbspec (--debug shows the traceback)"""

REPORT = ("this is a bug in verbspec, not a finding about the protocol or a problem with the "
          "input; please report it with the command line and this message to the verbspec "
          "issue tracker")

DEBUG_HELP = "on an internal error, print the Python traceback"


class UsageError(Exception):
    """An argument the parser refuses; carries the parser, whose usage line is printed."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser = parser


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors exit 3 (invalid input), not argparse's 2, which
    is the code for an inconclusive check."""

    def error(self, message: str) -> Any:
        raise UsageError(self, message)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option's help; the epilog's layout kept."""


@dataclass(frozen=True)
class Command:
    """One command: ``verbspec NAME ...``. A name of two words (``trace validate``) is a
    parser of its own, chosen when the command line starts with both words (the first word's
    command may take any word as its first argument). A one-word command may have aliases,
    other names that run it too; ``verbspec --help`` lists them beside the name."""

    name: str
    help: str                                           # in ``verbspec --help``; description
    arguments: Callable[[Parser], None]                 # declares the arguments on the parser
    handler: Callable[[argparse.Namespace], int]        # runs; returns the exit code
    epilog: str = EPILOG
    aliases: tuple[str, ...] = ()                       # other names of a one-word command

    def __post_init__(self) -> None:
        if self.aliases and len(self.words) > 1:
            raise ValueError(f"{self.name}: only a one-word command has aliases")

    @property
    def words(self) -> list[str]:
        return self.name.split()


def by_name(*commands: Command) -> dict[str, Command]:
    """The commands by name, in the order ``verbspec --help`` lists them."""
    return {c.name: c for c in commands}


def version() -> str:
    try:
        return metadata.version("verbspec")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _also(aliases: Sequence[str]) -> str:
    """The aliases, as a command's own ``--help`` names them after its description."""
    if not aliases:
        return ""
    return f" (alias{'es' if len(aliases) > 1 else ''}: {', '.join(aliases)})"


def build_parser(commands: Iterable[Command]) -> Parser:
    """``verbspec``'s parser: --version, --debug and a subcommand per one-word command (its
    aliases too)."""
    p = Parser(prog="verbspec", description=DESCRIPTION, epilog=EPILOG,
               formatter_class=HelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    common = Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help=f"{DEBUG_HELP} (default: False)")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND",
                           parser_class=Parser)
    for c in commands:
        if len(c.words) == 1:
            cp = sub.add_parser(c.name, aliases=list(c.aliases), help=c.help,
                                description=c.help + _also(c.aliases), epilog=c.epilog,
                                formatter_class=HelpFormatter, parents=[common])
            cp.set_defaults(cmd=c.name)     # an alias runs the command under its name
            c.arguments(cp)
    return p


def own_parser(c: Command) -> Parser:
    """The parser of a command of more than one word."""
    p = Parser(prog=f"verbspec {c.name}", description=c.help, epilog=c.epilog,
               formatter_class=HelpFormatter)
    c.arguments(p)
    p.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    p.set_defaults(cmd=c.name)
    return p


def main(commands: Mapping[str, Command], argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        # paths given as bytes that are not UTF-8 are printed escaped, not raised on
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    argv = list(sys.argv[1:] if argv is None else argv)
    own = next((c for c in commands.values()
                if len(c.words) > 1 and argv[:len(c.words)] == c.words), None)
    parser = own_parser(own) if own is not None else build_parser(commands.values())
    try:
        args = parser.parse_args(argv[len(own.words):] if own is not None else argv)
    except UsageError as e:
        e.parser.print_usage(sys.stderr)
        print(f"{e.parser.prog}: error: {e}", file=sys.stderr)
        return EXIT_INPUT
    except SystemExit as e:         # --help, --version
        return e.code if isinstance(e.code, int) else EXIT_OK
    return run(commands, args)


def run(commands: Mapping[str, Command], args: argparse.Namespace) -> int:
    """The command's handler, its exceptions mapped to exit codes."""
    try:
        return commands[args.cmd].handler(args)
    except (ParamError, TraceFormatError, InputError) as e:
        print(f"verbspec {args.cmd}: {e}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:
        return reader_gone(EXIT_OK)
    except Exception as e:
        if args.debug:
            traceback.print_exc()
        print(f"verbspec {args.cmd}: internal error: {type(e).__name__}: {e}\n"
              f"verbspec {args.cmd}: {REPORT}"
              + ("" if args.debug else " (--debug adds the traceback)"), file=sys.stderr)
        return EXIT_INTERNAL
