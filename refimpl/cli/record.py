"""``verbspec trace record``: run unmodified programs under the raw verbs recorder
(native/record/recorder.c; refimpl/rxe/record.py), on this host or in the soft-RoCE guest,
several commands at once (the ranks of one job, separated by ``:::``); each command's exit
status and every recording file the run left, with its event counts."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verbspec.proofs.report import EXIT_OK, EXIT_VIOLATION
from verbspec.refimpl.cli.inputs import InputError, check_dir
from verbspec.refimpl.cli.registry import Command, Parser
from verbspec.refimpl.rxe import native_programs as vn
from verbspec.refimpl.rxe import record as rr

SEPARATOR = ":::"
DEFAULT_OUT = Path("recordings")

RECORD_EPILOG = """exit codes:
  0  every command exited 0 (its recording files are listed)
  1  a command exited otherwise (its status and stderr are printed; the files are still
     listed)
  3  invalid input: no command, an --out that cannot be written, a recorder that cannot be
     built here (the message says what to install), a guest that cannot be prepared
  4  internal error: a bug in verbspec (--debug shows the traceback)"""


def arguments(p: Parser) -> None:
    p.add_argument("--guest", action="store_true",
                   help="run in the soft-RoCE guest (rxe0, rxe1 over a veth pair; needed for "
                        "verbs programs here, where the host has no RDMA device); the current "
                        "directory and --out are shared with it at their own paths")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                   help="where each process writes <program>.<pid>.jsonl (made if missing)")
    p.add_argument("--share", type=Path, action="append", default=[], metavar="DIR",
                   help="with --guest: another host directory the commands write into, shared "
                        "read-write at its own path (repeatable)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="seconds each command may run; then it is ended (exit 124)")
    p.add_argument("--json", action="store_true",
                   help='print one JSON object: {"ok", "where", "seconds", "commands": '
                        '[{"argv", "exit", "stdout", "stderr"}], "files": [{"path", "pid", '
                        '"argv", "events", "kinds", "ended", "bad_lines"}]}')
    p.add_argument("command", nargs="*", metavar="CMD",
                   help="after --: a command and its arguments; ':::' starts another command "
                        "run at the same time (the ranks of one job)")


def split_commands(words: list[str]) -> list[list[str]]:
    """The commands between ':::' separators; an empty one is refused."""
    if words[:1] == ["--"]:
        words = words[1:]
    commands: list[list[str]] = [[]]
    for w in words:
        if w == SEPARATOR:
            commands.append([])
        else:
            commands[-1].append(w)
    if not any(commands):
        raise InputError("no command given: put it after --, e.g. 'verbspec trace record -- "
                         "PROGRAM ARGS'")
    for i, c in enumerate(commands):
        if not c:
            raise InputError(f"command {i + 1} is empty: '{SEPARATOR}' must stand between two "
                             f"commands")
    return commands


def _run(args: argparse.Namespace, commands: list[list[str]]) -> rr.RecordOutcome:
    try:
        library = rr.build_recorder()
    except vn.VerbsUnavailable as e:
        raise InputError(f"the recorder cannot be built here: {e} (Debian: apt install "
                         f"libibverbs-dev)") from None
    except vn.BuildError as e:
        raise InputError(f"the recorder cannot be built here: {e}") from None
    out = args.out.resolve()
    if not args.guest:
        return rr.record_on_host(commands, out, args.timeout, library)
    from verbspec.refimpl.rxe import guest as rg

    try:
        image = rg.prepare(log=lambda m: print(m, file=sys.stderr))
        shares = [out, *(d.resolve() for d in args.share)]
        with rg.RxeGuest.start(Path.cwd(), shares=shares, image=image) as guest:
            print(f"verbspec trace record: guest ready in {guest.boot_seconds:.1f} s",
                  file=sys.stderr)
            return rr.record_in_guest(guest.run, commands, out, args.timeout, library)
    except (rg.RxeGuestError, vn.VerbsRunError) as e:
        raise InputError(f"the guest: {e}") from None


def print_outcome(res: rr.RecordOutcome, as_json: bool) -> None:
    if as_json:
        print(json.dumps(res.as_json()))
        return
    for i, c in enumerate(res.commands, 1):
        status = "timed out" if c.returncode == rr.TIMED_OUT else f"exit {c.returncode}"
        print(f"command {i} ({res.where}): {status}: {' '.join(c.argv)}")
        if c.returncode != 0 and c.stderr.strip():
            for line in c.stderr.strip().splitlines()[-10:]:
                print(f"  stderr: {line}")
    print(f"{len(res.files)} recording file(s), {res.seconds:.1f} s:")
    for f in res.files:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(f.kinds.items()))
        tail = "" if f.ended else " (no end line: the process was killed, exec'd or _exit'ed)"
        bad = f", {f.bad_lines} unparseable line(s)" if f.bad_lines else ""
        print(f"  {f.path}: {f.events} events ({kinds}){bad}{tail}")


def cmd_trace_record(args: argparse.Namespace) -> int:
    commands = split_commands(args.command)
    if args.timeout <= 0:
        raise InputError(f"--timeout {args.timeout:g}: expected a positive number of seconds")
    check_dir(args.out, "--out")
    for d in args.share:
        if not d.is_dir():
            raise InputError(f"--share {d}: not a directory")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {args.out}: cannot make it: {e.strerror or e}") from None
    res = _run(args, commands)
    print_outcome(res, args.json)
    return EXIT_OK if res.ok else EXIT_VIOLATION


COMMAND = Command("trace record",
                  "run unmodified programs under the raw verbs recorder (an LD_PRELOAD "
                  "library): every verbs setup call, post, non-empty poll and TCP byte of each "
                  "process into DIR/<program>.<pid>.jsonl (docs/verbs.md); ':::' separates "
                  "commands run at once",
                  arguments, cmd_trace_record, epilog=RECORD_EPILOG)
