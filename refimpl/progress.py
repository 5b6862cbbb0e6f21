"""Progress output for long commands (``verbspec check``, ``verbspec envelope``) and a plain
table on stdout.

On a terminal, a live status line shows the current task and its latest note. Without one (a
pipe, a CI log), a background thread writes a timestamped heartbeat line to stderr at a fixed
interval, naming the phase and its latest note, so a log shows the run is alive; each task's
start and end are logged too. ``enabled=False`` (``--quiet``) silences both.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter

from rich.console import Console
from rich.status import Status
from rich.table import Table

from verbspec.proofs.report import Result

# seconds between heartbeat lines when stderr is not a terminal (the contract is at most 10)
HEARTBEAT_SECONDS = 5.0


class Progress:
    """A spinner on a terminal, heartbeat lines otherwise; both on stderr."""

    def __init__(self, enabled: bool = True, label: str = "verbspec",
                 heartbeat: float | None = None, terminal: bool | None = None):
        self.console = Console(stderr=True)
        on_terminal = self.console.is_terminal if terminal is None else terminal
        self.live = enabled and on_terminal
        self.beating = enabled and not on_terminal
        self.label = label
        self.interval = HEARTBEAT_SECONDS if heartbeat is None else heartbeat
        self.status: Status | None = None
        self.task = "starting"
        self.text = ""
        self.between_tasks = False   # after a task's done line, no heartbeat until the next
        self.t0 = self.started = time.perf_counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()   # a beat and a task's own line never interleave
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Progress:
        if self.live:
            self.status = self.console.status("starting")
            self.status.start()
        if self.beating:
            self._thread = threading.Thread(target=self._beat, name="verbspec-heartbeat",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.status:
            self.status.stop()
            self.status = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def start(self, task: str) -> None:
        if self.status:
            self.status.update(task)
        with self._lock:
            self.task, self.text, self.t0 = task, "", time.perf_counter()
            self.between_tasks = False
            self._log(f"{task}: started")

    def note(self, text: str) -> None:
        self.text = text
        if self.status:
            self.status.update(f"{self.task}: {text}")

    def done(self) -> None:
        if self.live:
            self.console.log(f"{self.task} done in {time.perf_counter() - self.t0:.1f}s")
        with self._lock:
            self.between_tasks = True
            self._log(f"{self.task}: done in {time.perf_counter() - self.t0:.1f}s")

    def summary(self, results: list[Result], code: int) -> None:
        """One closing line for a log: how many verdicts of each kind, the time, the exit. The
        heartbeat stops first, so the closing line is the log's last."""
        self.stop()
        counts = Counter(r.verdict for r in results)
        kinds = ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "no results"
        self._log(f"{len(results)} results ({kinds}) in "
                  f"{time.perf_counter() - self.started:.1f}s; exit {code}")

    def _log(self, text: str) -> None:
        if self.beating:
            print(f"{time.strftime('%H:%M:%S')} {self.label}: {text}", file=sys.stderr,
                  flush=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                if self.between_tasks or self._stop.is_set():
                    continue
                note = f": {self.text}" if self.text else ""
                self._log(f"{self.task}{note} (running {time.perf_counter() - self.t0:.0f}s, "
                          f"total {time.perf_counter() - self.started:.0f}s)")


def print_table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    """A plain table on stdout (numbers right-aligned)."""
    console = Console(file=sys.stdout, width=max(Console().width, 120))
    table = Table(title=title)
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right", no_wrap=i > 0)
    for row in rows:
        table.add_row(*row)
    console.print(table)
