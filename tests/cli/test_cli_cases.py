"""The command line's input boundaries: each malformed input is refused with exit 3 and a message
naming the problem, output paths are checked before any work, an internal error exits 4, and
usage errors are invalid input, not "inconclusive"."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from verbspec.proofs.report import EXIT_INPUT, EXIT_INTERNAL, EXIT_OK
from verbspec.proofs.traces import write_trace
from verbspec.refimpl.cli import check, envelope
from verbspec.refimpl.cli import main as cli
from verbspec.refimpl.cli.main import main
from verbspec.spec import protocols
from verbspec.spec.lts import run_step, start_trace
from verbspec.spec.tagmatch import system as ts


def clean_trace(tmp_path: Path, steps: int = 4) -> Path:
    """A short trace of the tag-matching spec without a violation (its first enabled moves)."""
    system = ts.build()
    trace = start_trace(system)
    for _ in range(steps):
        act, args = next((a, x) for a in system.actions for x in a.enabled(trace.steps[-1].state))
        run_step(system, trace, act, args)
    return write_trace(trace, tmp_path / "clean.itf.json")


def edited(path: Path, out: Path, edit) -> Path:
    doc = json.loads(path.read_text())
    edit(doc)
    out.write_text(json.dumps(doc))
    return out


# ------------------------------------------------------------------------------ match
@pytest.mark.parametrize("event, where", [
    ({"op": "cancel", "id": ["r"]}, "$.events[1].id: expected a string"),
    ({"op": "cancel", "id": {"r": 1}}, "$.events[1].id: expected a string"),
    ({"op": ["arrive"]}, '$.events[1].op: expected "post_recv", "arrive" or "cancel"'),
    ({"op": {"arrive": 1}}, '$.events[1].op: expected "post_recv", "arrive" or "cancel"'),
])
def test_match_refuses_an_id_or_op_that_is_a_list_or_object(event, where, tmp_path, capsys):
    post = {"op": "post_recv", "id": "r", "comm": 0, "src": 0, "tag": 0, "bytes": 1}
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"events": [post, event]}))
    assert main(["match", str(f)]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err == f"verbspec match: {where}\n"


def test_match_refuses_a_file_that_is_not_utf8(tmp_path, capsys):
    f = tmp_path / "s.json"
    f.write_bytes(b'{"events": []}\xff\xfe')
    assert main(["match", str(f)]) == EXIT_INPUT
    assert capsys.readouterr().err == f"verbspec match: {f}: not UTF-8 text (byte 14)\n"


def test_match_dash_reads_standard_input(monkeypatch, capsys):
    doc = {"events": [{"op": "arrive", "id": "m", "comm": 0, "src": 1, "tag": 2, "bytes": 3}]}
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(json.dumps(doc).encode())))
    assert main(["match", "-"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["unexpected"] == ["m"]


def test_match_dash_refuses_non_utf8_standard_input(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\xff")))
    assert main(["match", "-"]) == EXIT_INPUT
    assert capsys.readouterr().err == "verbspec match: -: not UTF-8 text (byte 0)\n"


# ------------------------------------------------------------------------------ replay / trace
def test_replay_refuses_an_action_argument_that_is_an_object(tmp_path, capsys):
    src = clean_trace(tmp_path)

    def edit(doc):
        args = doc["states"][1]["args"]
        args["#map"][0][1] = {"an": "object"}

    bad = edited(src, tmp_path / "bad.itf.json", edit)
    assert main(["replay", str(bad)]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err.startswith(f"verbspec replay: {bad}: step 1: action ")
    assert "{'an': 'object'}" in err and err.rstrip().endswith("is not enabled")


@pytest.mark.parametrize("variants, shown", [(5, "5"), ("no-barrier", "'no-barrier'"),
                                             ([1], "(1,)"), ({"a": 1}, "{'a': 1}")])
@pytest.mark.parametrize("command", ["replay", "trace"])
def test_meta_variants_that_are_not_a_list_of_names_are_refused(command, variants, shown,
                                                                  tmp_path, capsys):
    bad = edited(clean_trace(tmp_path), tmp_path / "bad.itf.json",
                 lambda doc: doc["#meta"].__setitem__("variants", variants))
    assert main([command, str(bad)]) == EXIT_INPUT
    assert capsys.readouterr().err == (f"verbspec {command}: $.#meta.variants: expected a "
                                       f"list of variant names, found {shown}\n")


def test_trace_refuses_to_overwrite_its_input(tmp_path, capsys):
    src = clean_trace(tmp_path)
    before = src.read_bytes()
    assert main(["trace", str(src), "--svg", str(src)]) == EXIT_INPUT
    assert capsys.readouterr().err == (f"verbspec trace: output {src}: is the input {src}; "
                                       f"refusing to overwrite it\n")
    assert src.read_bytes() == before
    # the same file under another spelling
    other = tmp_path / "." / src.name
    assert main(["trace", str(src), "--svg", str(other)]) == EXIT_INPUT
    assert src.read_bytes() == before


def test_trace_html_refuses_an_svg_output(tmp_path, capsys):
    src = clean_trace(tmp_path)
    out = tmp_path / "out.svg"
    assert main(["trace", str(src), "--html", "--svg", str(out)]) == EXIT_INPUT
    assert capsys.readouterr().err == (f"verbspec trace: --svg {out}: --html writes an HTML "
                                       f"page; give an output ending in .html, or drop --html "
                                       f"for an SVG\n")
    assert not out.exists()
    assert main(["trace", str(src), "--svg", str(tmp_path / "out.html")]) == EXIT_INPUT
    # the right extensions are written
    assert main(["trace", str(src), "--html", "--svg", str(tmp_path / "out.html")]) == EXIT_OK
    assert (tmp_path / "out.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["trace", str(src), "--html"]) == EXIT_OK
    assert (tmp_path / "clean.html").read_text().startswith("<!DOCTYPE html>")


def test_trace_refuses_an_output_it_cannot_write(tmp_path, capsys):
    src = clean_trace(tmp_path)
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "t.svg"
    assert main(["trace", str(src), "--svg", str(out)]) == EXIT_INPUT
    assert capsys.readouterr().err == (f"verbspec trace: output's directory {out.parent}: "
                                       f"exists and is not a directory\n")


# ------------------------------------------------------------------------------ check: paths
@pytest.fixture
def no_run(monkeypatch):
    """Fail the test if a check starts running: paths must be refused before any search."""
    def refuse(*a, **k):
        raise AssertionError("a check ran before its output paths were validated")

    monkeypatch.setattr(check, "run_method", refuse)


def test_check_refuses_a_trace_dir_that_is_a_file_before_searching(tmp_path, capsys, no_run):
    f = tmp_path / "traces"
    f.write_text("")
    assert main(["check", "--protocol", "tagmatch", "--trace-dir", str(f)]) == EXIT_INPUT
    assert capsys.readouterr().err == (f"verbspec check: --trace-dir {f}: exists and is not a "
                                       f"directory\n")


def test_check_refuses_a_trace_dir_that_cannot_be_created(tmp_path, capsys, no_run):
    (tmp_path / "file").write_text("")
    d = tmp_path / "file" / "traces"
    assert main(["check", "--trace-dir", str(d)]) == EXIT_INPUT
    assert capsys.readouterr().err == (f"verbspec check: --trace-dir {d}: cannot write there: "
                                       f"Not a directory\n")
    assert main(["check", "--trace-dir", "/proc/verbspec/traces"]) == EXIT_INPUT
    assert "cannot write there" in capsys.readouterr().err


def test_check_trace_dir_validation_leaves_nothing_behind(tmp_path, monkeypatch):
    d = tmp_path / "a" / "b"
    monkeypatch.setattr(check, "run_method", lambda *a, **k: [])
    assert main(["check", "--protocol", "tagmatch", "--method", "explore", "--quiet",
                 "--trace-dir", str(d)]) == EXIT_OK
    assert not (tmp_path / "a").exists()


def test_check_refuses_a_junit_file_that_is_a_directory(tmp_path, capsys, no_run):
    assert main(["check", "--junit", str(tmp_path)]) == EXIT_INPUT
    assert capsys.readouterr().err == f"verbspec check: --junit {tmp_path}: is a directory\n"


def test_envelope_refuses_a_bad_trace_dir_before_proving(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(envelope, "envelope_main", lambda args: pytest.fail("envelope ran"))
    f = tmp_path / "f"
    f.write_text("")
    assert main(["envelope", "--trace-dir", str(f)]) == EXIT_INPUT
    assert capsys.readouterr().err == (f"verbspec envelope: --trace-dir {f}: exists and is not "
                                       f"a directory\n")


# ------------------------------------------------------------------------------ trace names
def test_runs_with_different_params_write_different_traces(tmp_path, capsys):
    paths = []
    for bytes_ in (2, 3):
        code = main(["check", "--protocol", "tagmatch", "--method", "bmc", "--json", "--quiet",
                     "--variant", "silent-truncation", "--param", f"max_bytes={bytes_}",
                     "--trace-dir", str(tmp_path)])
        assert code == 1
        out = json.loads(capsys.readouterr().out)
        paths += [r["trace"] for r in out["results"] if r["trace"]]
    assert len(paths) == 2 and paths[0] != paths[1]
    assert all(Path(p).exists() for p in paths)
    name = Path(paths[0]).name
    assert name.startswith("tagmatch-silent-truncation-bmc-truncation_reported-")
    assert name.endswith(".itf.json") and len(name.split("-")[-1]) == len("12345678.itf.json")


def test_trace_digest_depends_on_params_and_variants_only():
    from verbspec.proofs.report import config_digest, trace_name

    a = trace_name("gate", "bmc", "inv", ("v",), {"x": 1, "y": 2})
    assert a == trace_name("gate", "bmc", "inv", ("v",), {"y": 2, "x": 1})
    assert a != trace_name("gate", "bmc", "inv", ("v",), {"x": 1, "y": 3})
    assert config_digest({"x": 1}, ()) != config_digest({"x": 1}, ("v",))
    # without parameters, the name is the plain one
    assert trace_name("gate", "bmc", "inv", ()) == "gate-base-bmc-inv.itf.json"


# ------------------------------------------------------------------------------ exit codes
def test_usage_errors_exit_3_not_2(capsys):
    assert main(["check", "--examples", "x"]) == EXIT_INPUT
    assert "argument --examples: invalid int value: 'x'" in capsys.readouterr().err
    assert main(["no-such-command"]) == EXIT_INPUT
    assert main([]) == EXIT_INPUT
    assert main(["check", "--method", "guess"]) == EXIT_INPUT


def test_an_internal_error_exits_4_and_says_it_is_a_bug(monkeypatch, capsys):
    def boom(args):
        raise RuntimeError("unexpected state")

    monkeypatch.setitem(cli.COMMANDS, "variants", replace(cli.COMMANDS["variants"],
                                                           handler=boom))
    assert main(["variants"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.startswith("verbspec variants: internal error: RuntimeError: unexpected state\n")
    assert "a bug in verbspec" in err
    assert "please report it with the command line and this message" in err
    assert "Traceback" not in err
    assert main(["--debug", "variants"]) == EXIT_INTERNAL
    assert "Traceback (most recent call last)" in capsys.readouterr().err
    assert main(["variants", "--debug"]) == EXIT_INTERNAL
    assert "Traceback (most recent call last)" in capsys.readouterr().err


# ------------------------------------------------------------------------------ help
def _subparsers(parser, prefix: str = ""):
    """Every subcommand's parser by its name, nested ones (``bench match``) included."""
    import argparse

    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[prefix + name] = sub
                found.update(_subparsers(sub, f"{prefix}{name} "))
    if not found and not prefix:
        raise AssertionError("no subcommands")
    return found


def option_blocks(text: str) -> dict[str, str]:
    """An option's lines in a help text, by its option string."""
    blocks: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        stripped = line.strip()
        if line.startswith("  -"):
            current = stripped.split()[0].rstrip(",")
            blocks[current] = stripped
        elif current and line.startswith("    ") and stripped:
            blocks[current] += " " + stripped
        else:
            current = None
    return blocks


def test_every_option_is_documented_with_its_default():
    parser = cli.parser()
    for name, sub in _subparsers(parser).items():
        text = sub.format_help()
        assert "exit codes:" in text and "4  internal error" in text, name
        blocks = option_blocks(text)
        for action in sub._actions:
            if action.dest == "help":
                continue
            assert action.help, f"{name} {action.option_strings or action.dest}: no help"
            if action.option_strings:
                block = blocks[action.option_strings[0]]
                assert "(default:" in block, f"{name}: {block}"
    top = parser.format_help()
    assert "``" not in top and "exit codes:" in top
    assert top.split("\n\n")[1].startswith("Check executable specs of RDMA")


@pytest.mark.parametrize("option, default", [
    ("--param", "[]"), ("--variant", "[]"), ("--trace-dir", "verbspec-traces"),
    ("--protocol", "all"), ("--junit", "None"), ("--quiet", "False")])
def test_check_help_documents(option, default, capsys):
    assert main(["check", "--help"]) == EXIT_OK
    block = option_blocks(capsys.readouterr().out)[option]
    assert len(block.split()) > 4 and f"(default: {default})" in block


def test_version(capsys):
    from importlib import metadata

    assert main(["--version"]) == EXIT_OK
    assert capsys.readouterr().out == f"verbspec {metadata.version('verbspec')}\n"


# ------------------------------------------------------------------------------ listings
@pytest.mark.parametrize("command", ["variants", "invariants", "params"])
def test_listings_have_json(command, capsys):
    assert main([command, "--protocol", "tagmatch", "--json"]) == EXIT_OK
    rows = json.loads(capsys.readouterr().out)[command]
    assert rows and all(r["protocol"] == "tagmatch" and r["name"] for r in rows)


def test_params_show_ranges_and_choices(capsys):
    assert main(["params", "--protocol", "tagmatch", "--json"]) == EXIT_OK
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["params"]}
    assert rows["senders"] == {"protocol": "tagmatch", "name": "senders", "type": "int",
                               "default": 1, "lo": 1, "hi": 4, "choices": [],
                               "range": "1..4", "doc": "sending ranks"}
    assert main(["params", "--protocol", "gate"]) == EXIT_OK
    line = next(ln for ln in capsys.readouterr().out.splitlines() if " window " in ln)
    assert "1..32768" in line


def _bad_values(spec):
    """0, -1, one past the upper bound and a 30-digit number, where each is out of range."""
    tries = {0, -1, spec.hi + 1, 10**30, -(10**30)}
    return sorted(v for v in tries if v < spec.lo or v > spec.hi)


@pytest.mark.parametrize("protocol", sorted(protocols.MODULES))
def test_every_parameter_has_bounds_and_refuses_values_outside_them(protocol, capsys, no_run):
    """No value makes a check run away: each integer parameter states both bounds, and a value
    outside them is refused before anything runs, naming the parameter."""
    for spec in protocols.load(protocol).PARAMS:
        if spec.type is not int:
            continue
        assert spec.lo is not None and spec.hi is not None, spec.name
        for value in _bad_values(spec):
            assert main(["check", "--protocol", protocol, "--param",
                         f"{spec.name}={value}"]) == EXIT_INPUT, (spec.name, value)
            err = capsys.readouterr().err
            assert f"parameter {spec.name}: {value}" in err, err


def test_value_range_texts():
    from verbspec.spec.params import ParamSpec, value_range

    assert value_range(ParamSpec("a", str, "x", "", choices=("x", "y"))) == "x | y"
    assert value_range(ParamSpec("a", int, 0, "", hi=3)) == "<= 3"
    assert value_range(ParamSpec("a", int, 0, "")) == "any integer"


@pytest.mark.parametrize("command", ["replay", "trace"])
def test_a_meta_that_decodes_to_a_set_is_refused(command, tmp_path, capsys):
    bad = edited(clean_trace(tmp_path), tmp_path / "bad.itf.json",
                 lambda doc: doc.__setitem__("#meta", {"#set": []}))
    assert main([command, str(bad)]) == EXIT_INPUT
    assert capsys.readouterr().err == f"verbspec {command}: $.#meta: not a record\n"
