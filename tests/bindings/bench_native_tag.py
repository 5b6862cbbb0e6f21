"""Benchmark: the cost of one tag-matching call, the C engine against the reference engine.

Not collected (the file name does not start with ``test_``). Run it as a script,
``python tests/bindings/bench_native_tag.py [N]``: one job of 8 senders sending N messages over 64
tags,
receives posted for all of them with a quarter wildcarded (ANY_SOURCE, ANY_TAG or both), half
posted before the messages arrive (so arrivals search the posted queues) and half after (so
receives search the unexpected queues), without offload. The same calls go to the reference
engine, to the C engine through its adapter (``NativeTagEngine``: each call returns an
``Emitted``), to the C engine's functions directly through cffi (no ``Emitted`` built), and
to the C engine from a C program linked with it (the same kind of workload, drawn in C; needs
a C compiler). It prints nanoseconds per call for each; it measures, it does not assert a time.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from verbspec import native
from verbspec.refimpl.bindings.native_tagmatch import NativeTagEngine
from verbspec.refimpl.engines.tagmatch_engine import TagMatchEngine
from verbspec.spec.tagmatch.lists import ANY
from verbspec.spec.tagmatch.system import build

SENDERS, TAGS = 8, 64
TAGMATCH = native.engine("tagmatch")

# The same workload shape in C: messages with random tags in a shuffled order, receives for
# them (a quarter wildcarded) half before the messages arrive and half after.
C_DRIVER = r"""
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "tagmatch_engine.h"
static uint64_t s = 88172645463325252ULL;
static uint64_t rnd(void) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; }
static void recv(vs_tag *e, int src, int tag) {
    unsigned r = (unsigned)(rnd() % 100);
    vs_tag_post_recv(e, 0, r < 10 || (r >= 20 && r < 25) ? VS_TAG_ANY : src,
                     r >= 10 && r < 25 ? VS_TAG_ANY : tag, 1);
}
int main(int argc, char **argv) {
    int senders = 8, tags = 64, n = argc > 1 ? atoi(argv[1]) : 100000;
    int per = n / senders;
    n = per * senders;
    vs_tag_config cfg = {senders, per, tags, 1, 1, 1, 0};
    vs_tag *e;
    if (vs_tag_create(&cfg, &e)) return 1;
    int *src = malloc(sizeof(int) * (size_t)n), *tag = malloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) { src[i] = i % senders; tag[i] = (int)(rnd() % (uint64_t)tags); }
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint64_t)(i + 1)), a = src[i], b = tag[i];
        src[i] = src[j]; tag[i] = tag[j]; src[j] = a; tag[j] = b;
    }
    int *next = calloc((size_t)senders, sizeof(int));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n / 2; i++) recv(e, src[i], tag[i]);
    for (int i = 0; i < n; i++) {
        int mid = src[i] * per + next[src[i]]++;
        vs_tag_send(e, src[i], 0, tag[i], 1);
        vs_tag_delivered(e, mid, 0, src[i], tag[i], 1, VS_TAG_EAGER);
    }
    for (int i = n / 2; i < n; i++) recv(e, src[i], tag[i]);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
    vs_tag_view v;
    vs_tag_get_view(e, &v);
    printf("%.1f %d %d\n", ns / (3.0 * n), v.nposted, v.nunexpected);
    vs_tag_destroy(e);
    return 0;
}
"""


def workload(n: int, seed: int = 1) -> list[tuple]:
    """(call, args...) for n messages and n receives; deliveries name the message id."""
    rng = random.Random(seed)
    per = n // SENDERS
    sends = [(s, rng.randrange(TAGS)) for s in range(SENDERS) for _ in range(per)]
    rng.shuffle(sends)
    counts = [0] * SENDERS
    msgs = []
    for s, tag in sends:
        msgs.append((s * per + counts[s], s, tag))
        counts[s] += 1

    def recv(src: int, tag: int) -> tuple:
        r = rng.random()
        return ("post_recv", 0, ANY if r < 0.1 or 0.2 <= r < 0.25 else src,
                ANY if 0.1 <= r < 0.25 else tag, 1)

    calls: list[tuple] = []
    half = len(msgs) // 2
    calls += [recv(src, tag) for _, src, tag in msgs[:half]]
    for mid, src, tag in msgs:
        calls.append(("send", src, 0, tag, 1))
        calls.append(("delivered", mid))
    calls += [recv(src, tag) for _, src, tag in msgs[half:]]
    return calls


def run_python(eng, calls: list[tuple]) -> float:
    packets = {}
    t0 = time.perf_counter()
    for name, *args in calls:
        if name == "delivered":
            eng.delivered(packets[args[0]])
        else:
            out = getattr(eng, name)(*args)
            for p in out.sends:
                packets[p.mid] = p
    return time.perf_counter() - t0


def run_lib(lib, e, calls: list[tuple], msg: dict) -> float:
    send, post, deliver = lib.vs_tag_send, lib.vs_tag_post_recv, lib.vs_tag_delivered
    t0 = time.perf_counter()
    for name, *args in calls:
        if name == "send":
            send(e, *args)
        elif name == "post_recv":
            post(e, *args)
        else:
            deliver(e, *msg[args[0]])
    return time.perf_counter() - t0


def main(n: int) -> None:
    n -= n % SENDERS
    cfg = replace(build({}).params, senders=SENDERS, messages=n // SENDERS, tags=TAGS,
                  capacity=0, max_bytes=1, eager_limit=1)
    calls = workload(n)
    ref = TagMatchEngine(cfg)
    t_ref = run_python(ref, calls)
    nat = NativeTagEngine(cfg)
    t_nat = run_python(nat, calls)
    assert nat.view() == ref.view()
    mod = native.load("tagmatch")
    c = mod.ffi.new("vs_tag_config *", {
        "senders": cfg.senders, "messages": cfg.messages, "tags": cfg.tags, "comms": 1,
        "max_bytes": 1, "eager_limit": 1, "capacity": 0})
    out = mod.ffi.new("vs_tag **")
    mod.lib.vs_tag_create(c, out)
    e = mod.ffi.gc(out[0], mod.lib.vs_tag_destroy)
    per = n // SENDERS
    tags = {}                       # each message's tag, as its send posts it
    counts = [0] * SENDERS
    for name, *args in calls:
        if name == "send":
            s, _, tag, _ = args
            tags[s * per + counts[s]] = tag
            counts[s] += 1
    msg = {mid: (mid, 0, mid // per, tag, 1, mod.lib.VS_TAG_EAGER) for mid, tag in tags.items()}
    t_lib = run_lib(mod.lib, e, calls, msg)
    k = len(calls)
    print(f"{n} messages, {k} calls (post_recv, send, delivered), no offload")
    print(f"reference engine (Python)      {t_ref / k * 1e9:8.0f} ns/call")
    print(f"C engine via NativeTagEngine   {t_nat / k * 1e9:8.0f} ns/call")
    print(f"C engine via cffi calls only   {t_lib / k * 1e9:8.0f} ns/call")
    cc = shutil.which("cc")
    if cc is None:
        print("C engine from C                 (no C compiler)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bench.c").write_text(C_DRIVER)
        subprocess.run([cc, "-std=c11", "-O2", f"-I{TAGMATCH.folder}", "-o", f"{tmp}/bench",
                        f"{tmp}/bench.c", str(TAGMATCH.source)], check=True)
        ns, left, unexpected = subprocess.run([f"{tmp}/bench", str(n)], check=True,
                                              capture_output=True, text=True).stdout.split()
    print(f"C engine from C                {float(ns):8.0f} ns/call "
          f"({left} receives left pending, {unexpected} messages unexpected)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
