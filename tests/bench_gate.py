"""Benchmark: the per-gate cost of the gate engine, one rank's steady-state decode gate (window
armed): call_gate, post the send chain, account for one poll (the chain's send completions and
the slot's receive completions), repost the slot for seq + window, consume.

Not collected (the file name does not start with ``test_``). Run it as a script,
``python tests/bench_gate.py [GATES]``: it prints ns per gate for the reference engine (Python),
the C engine through its Python adapter (``--impl native``), and the C engine alone, driven by
a C loop compiled here against ``native/gate_engine.c`` with ``cc -O2``. It measures, it does
not assert a time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from verbspec.refimpl.gate_engine import Completion, GateEngine
from verbspec.refimpl.native_gate import NativeGateEngine
from verbspec.spec.gate.system import build
from verbspec.spec.gate.wire import TcpItem

ROOT = Path(__file__).resolve().parents[1]
CFG = build({}).params      # ds4's defaults: window 16, 24576-byte vectors in 2 chunks

C_LOOP = r"""
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "gate_engine.h"

int main(int argc, char **argv)
{
    unsigned long long n = strtoull(argv[1], NULL, 10);
    vs_gate_config c = {24576, 16384, 16, 86, 86, 0, 1, 0, 1024, 1024, 256, 64, 256 * 16384};
    vs_gate *e;
    if (vs_gate_create(&c, 0, &e, NULL, 0)) return 2;
    vs_gate_tcp barrier = {VS_GATE_TCP_BYTE, 0xD1, 0, 0};
    if (vs_gate_setup(e) || vs_gate_call_gate(e, 0, 0, 1) || vs_gate_advance(e)
        || vs_gate_advance(e) || vs_gate_tcp_read(e, &barrier)) return 3;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned long long seq = 1; seq <= n; seq++) {
        unsigned long long slot = (seq - 1) % 86;
        if (seq > 1 && vs_gate_call_gate(e, slot / 2, slot % 2, seq)) return 4;
        vs_gate_completion polled[4] = {{VS_GATE_OP_SEND, 0, seq, 16384},
                                        {VS_GATE_OP_SEND, 0, seq, 8192},
                                        {VS_GATE_OP_RECV, 0, 0, 16384},
                                        {VS_GATE_OP_RECV, 0, seq, 8192}};
        uint32_t size;
        if (vs_gate_advance(e) || vs_gate_poll_size(e, &size)
            || vs_gate_completions(e, polled, 4) || vs_gate_advance(e) || vs_gate_consume(e))
            return 5;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (vs_gate_out(e)->result[0] || vs_gate_last_gate_seq(e) != n) return 6;
    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("%.1f\n", ns / (double)n);
    vs_gate_destroy(e);
    return 0;
}
"""


def python_side(engine, n: int) -> float:
    """ns per gate through the Python interface (the reference engine or the adapter)."""
    e = engine
    e.setup()
    e.call_gate(0, 0, 1)
    e.advance()
    e.advance()
    e.tcp_read(TcpItem("byte", 0xD1))
    t0 = time.perf_counter_ns()
    for seq in range(1, n + 1):
        slot = (seq - 1) % 86
        if seq > 1:
            e.call_gate(slot // 2, slot % 2, seq)
        e.advance()
        e.poll_size()
        e.completions((Completion("send", seq, 0, 16384), Completion("send", seq, 0, 8192),
                       Completion("recv", 0, 0, 16384), Completion("recv", seq, 0, 8192)))
        e.advance()
        e.consume()
    ns = (time.perf_counter_ns() - t0) / n
    assert e.view().last_gate_seq == n and not e.view().error
    return ns


def c_side(n: int) -> float | None:
    """ns per gate of the C engine driven by a C loop; None without a compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "loop.c", Path(tmp) / "loop"
        src.write_text(C_LOOP, encoding="utf-8")
        subprocess.run([cc, "-std=c11", "-O2", "-I", str(ROOT / "native"), str(src),
                        str(ROOT / "native" / "gate_engine.c"), "-o", str(exe)], check=True)
        return float(subprocess.run([str(exe), str(n)], capture_output=True, text=True,
                                    check=True).stdout)


def main(n: int) -> dict:
    ref = python_side(GateEngine(CFG), n)
    nat = python_side(NativeGateEngine(CFG), n)
    c = c_side(n * 100)
    return {"gates": n, "refimpl_ns": round(ref), "native_adapter_ns": round(nat),
            "native_c_ns": c, "refimpl_over_c": round(ref / c) if c else None}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)))
