"""``verbspec match FILE``: the tag-matching engine run on a receiver-side scenario (the
scenario's format and the runner: scenario.py)."""

from __future__ import annotations

import argparse

from verbspec.refimpl.cli import scenario
from verbspec.refimpl.cli.registry import Command, Parser


def arguments(m: Parser) -> None:
    m.add_argument("file", help="a scenario JSON file; - reads standard input")


def cmd_match(args: argparse.Namespace) -> int:
    return scenario.match_main(args.file)


COMMAND = Command("match", "run the tag-matching engine on a scenario file", arguments,
                  cmd_match)
