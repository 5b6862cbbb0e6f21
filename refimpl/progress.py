"""Terminal output for ``verbspec check``: a live status line while checks run (only on a
terminal) and the summary table."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.status import Status
from rich.table import Table

from verbspec.proofs.report import Result

VERDICT_STYLE = {"proved": "bold green", "held": "green", "violated": "bold red",
                 "inconclusive": "yellow", "unknown": "yellow", "timeout": "yellow"}


class Progress:
    """A spinner with the current task and its latest note, on stderr when it is a terminal."""

    def __init__(self, enabled: bool = True):
        self.console = Console(stderr=True)
        self.enabled = enabled and self.console.is_terminal
        self.status: Status | None = None
        self.task = ""
        self.t0 = 0.0

    def __enter__(self) -> Progress:
        if self.enabled:
            self.status = self.console.status("starting")
            self.status.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.status:
            self.status.stop()
            self.status = None

    def start(self, task: str) -> None:
        self.task, self.t0 = task, time.perf_counter()
        if self.status:
            self.status.update(task)

    def note(self, text: str) -> None:
        if self.status:
            self.status.update(f"{self.task}: {text}")

    def done(self) -> None:
        if self.enabled:
            self.console.log(f"{self.task} done in {time.perf_counter() - self.t0:.1f}s")


def print_results(results: list[Result], code: int) -> None:
    console = Console(file=sys.stdout, width=max(Console().width, 140))
    table = Table(title="verbspec check")
    for col in ("protocol", "invariant", "method", "verdict", "bound", "s"):
        table.add_column(col, overflow="fold")
    for r in results:
        table.add_row(r.protocol, r.invariant, r.method,
                      f"[{VERDICT_STYLE[r.verdict]}]{r.verdict}[/]", r.bound, f"{r.seconds:.1f}")
    console.print(table)
    undecided: dict[tuple[str, str, str, str | None], list[str]] = {}
    for r in results:
        if r.verdict == "violated":
            console.print(f"[bold red]{r.protocol} {r.invariant} violated[/] ({r.method}): "
                          f"{r.detail}\n  trace: {r.trace}")
        elif r.verdict in ("inconclusive", "unknown", "timeout"):
            # one line per reason: a method out of its scope says the same of every invariant
            undecided.setdefault((r.protocol, r.method, r.verdict, r.detail), []).append(
                r.invariant)
    for (protocol, method, verdict, detail), names in undecided.items():
        console.print(f"[yellow]{protocol} {', '.join(names)} {verdict}[/] ({method}): {detail}")
    console.print(f"exit {code}")
