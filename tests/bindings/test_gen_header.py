"""The spec's vocabulary for the C code (native/generated/spec_constants.h, written by
refimpl/bindings/gen_header.py): the checked-in header is the one the spec makes now, its
macros are the spec's values once compiled, and the engines print the spec's texts through it
rather than copies of their own."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from conftest import native_module, require

from verbspec import native
from verbspec.refimpl.bindings import gen_header, native_gate, native_tagmatch
from verbspec.spec.gate import constants, errors
from verbspec.spec.gate import params as gate_params
from verbspec.spec.tagmatch import system as tag_system

HEADER = native.SPEC_HEADER
SEP = "\x1e"


def _cc() -> str:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    require("native", None if cc else "no C compiler (cc) on PATH")
    return cc


def gate_texts() -> dict[str, str]:
    """Every text of spec/gate/errors.py the header carries, by name."""
    out = {n: m.fmt for n, m in vars(errors).items() if isinstance(m, errors.Message)}
    out.update({n: v for n, v in vars(errors).items() if n.endswith("_ERRNO")})
    return out


def test_the_checked_in_header_is_current():
    """Where this fails, the spec changed: run python -m verbspec.refimpl.bindings.gen_header
    and rebuild (pip install -e .)."""
    assert HEADER.read_text(encoding="utf-8") == gen_header.render()
    assert gen_header.main(["--check"]) == 0


def test_a_stale_header_is_reported_and_rewritten(tmp_path, capsys):
    stale = tmp_path / "spec_constants.h"
    stale.write_text(gen_header.render().replace('"wc status %d"', '"wc status %u"'))
    assert gen_header.main(["--check", "--output", str(stale)]) == 1
    assert "is not current: run python -m verbspec.refimpl.bindings.gen_header" in (
        capsys.readouterr().err)
    assert gen_header.main(["--output", str(stale)]) == 0
    assert stale.read_text() == gen_header.render()


def test_every_line_fits_and_every_macro_is_defined_once():
    text = HEADER.read_text(encoding="utf-8")
    assert max(map(len, text.splitlines())) <= gen_header.WIDTH
    names = re.findall(r"^#define (\w+)", text, flags=re.M)
    assert len(names) == len(set(names)) and all(n.startswith("VS_SPEC_") for n in names[1:])


def test_compiled_the_macros_are_the_specs_values(tmp_path):
    """A C program prints every text and value the header holds: each is the spec's, so the
    header's escaping, wrapping and suffixes change nothing."""
    texts = gate_texts()
    params = [(f"VS_SPEC_GATE_{p.name.upper()}_{k}", v) for p in gate_params.PARAMS
              if p.type is int for k, v in (("DEFAULT", p.default), ("MIN", p.lo),
                                            ("MAX", p.hi)) if v is not None]
    params += [(f"VS_SPEC_TAGMATCH_{p.name.upper()}_{k}", v) for p in tag_system.PARAMS
               if p.type is int for k, v in (("DEFAULT", p.default), ("MIN", p.lo),
                                             ("MAX", p.hi)) if v is not None]
    params += [("VS_SPEC_GATE_POLL_BATCH", constants.POLL_BATCH),
               ("VS_SPEC_GATE_BIG_POLL_BATCH", constants.BIG_POLL_BATCH),
               ("VS_SPEC_GATE_DRAIN_POLL_BATCH(16)", 33)]
    names = [("VS_SPEC_GATE_PHASE_NAMES", native_gate.PHASES),
             ("VS_SPEC_GATE_BUF_NAMES", native_gate.BUFS),
             ("VS_SPEC_TAGMATCH_KIND_NAMES", native_tagmatch.KIND_NAMES),
             ("VS_SPEC_TAGMATCH_OP_NAMES", native_tagmatch.OP_KINDS),
             ("VS_SPEC_TAGMATCH_CQE_NAMES", native_tagmatch.CQE_KINDS)]
    body = [f'    fputs(VS_SPEC_GATE_{n}, stdout); putchar(0x1e);' for n in texts]
    body += [f'    printf("%llu", (unsigned long long)({m})); putchar(0x1e);'
             if v >= 0 else f'    printf("%lld", (long long)({m})); putchar(0x1e);'
             for m, v in params]
    for i, (m, _) in enumerate(names):
        body += [f"    static const char *const n{i}[] = {m};",
                 f"    for (size_t k = 0; k < sizeof n{i} / sizeof n{i}[0]; k++)",
                 f'        printf("%s%s", k ? "," : "", n{i}[k]);', "    putchar(0x1e);"]
    program = tmp_path / "print.c"
    program.write_text("\n".join(["#include <stdio.h>", f'#include "{HEADER}"',
                                  "int main(void)", "{", *body, "    return 0;", "}", ""]))
    exe = tmp_path / "print"
    done = subprocess.run([_cc(), "-std=c11", "-Wall", "-Wextra", "-Werror", "-Wpedantic",
                           "-o", str(exe), str(program)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    want = [*texts.values(), *(str(v) for _, v in params),
            *(",".join(items) for _, items in names)]
    assert got.split(SEP)[:-1] == want


def test_the_gate_engine_prints_the_specs_texts_by_name_and_no_copy_of_its_own():
    source = native.engine("gate").source.read_text(encoding="utf-8")
    literals = set(re.findall(r'"((?:[^"\\]|\\.)*)"', source))
    for name, text in gate_texts().items():
        assert f"SPEC({name})" in source, f"the gate engine never writes {name}"
        assert text not in literals, f"the gate engine writes its own copy of {name}"


def test_the_tag_engine_and_the_drivers_take_their_names_from_the_header():
    for path, macros in ((native.engine("tagmatch").source,
                          ("VS_SPEC_TAGMATCH_ALREADY_ARRIVED",
                           "VS_SPEC_TAGMATCH_ALREADY_CANCELLING", "VS_SPEC_TAGMATCH_KIND_NAMES")),
                         (native.HERE / "replay" / "gate_replay.c", ("VS_SPEC_GATE_BUF_NAMES",)),
                         (native.HERE / "replay" / "tagmatch_replay.c",
                          ("VS_SPEC_TAGMATCH_KIND_NAMES", "VS_SPEC_TAGMATCH_OP_NAMES",
                           "VS_SPEC_TAGMATCH_CQE_NAMES")),
                         (native.HERE / "verbs" / "verbs_gate.c",
                          ("VS_SPEC_GATE_BUF_NAMES", "SPEC(WINDOW_MAX)"))):
        text = path.read_text(encoding="utf-8")
        assert all(m in text for m in macros), path
    for path in (native.HERE / "replay").glob("*.c"):
        assert '"eager"' not in path.read_text() and '"blk"' not in path.read_text(), path


@pytest.mark.parametrize("name, value", [
    ("VS_GATE_DECODE_POLL", constants.POLL_BATCH),
    ("VS_GATE_BIG_POLL", constants.BIG_POLL_BATCH),
    ("VS_GATE_MAX_WINDOW", next(p.hi for p in gate_params.PARAMS if p.name == "window")),
    ("VS_GATE_MAX_BIG_DEPTH", next(p.hi for p in gate_params.PARAMS if p.name == "big_depth"))])
def test_the_gate_abi_names_the_specs_constants(name, value):
    assert getattr(native_module("gate").lib, name) == value
