"""The native tag-matching engine (``native/tagmatch/tagmatch_engine.c``) as a ``TagImpl``:
each call goes to the C engine through its cffi module, and what it emitted and its view come
back as the reference engine's ``Emitted`` and ``EngineView``; a refusal is raised as
``EngineError`` with the C engine's message (the reference engine's text).

``native(cfg)`` is the factory ``verbspec conform --impl native`` uses.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from verbspec import native as native_pkg
from verbspec.refimpl.engines.tagmatch_engine import (
    EAGER,
    RNDV,
    Emitted,
    EngineError,
    EngineView,
    Packet,
    Read,
)
from verbspec.spec.tagmatch.state import Params

NOT_BUILT = ("the native tag-matching engine is not built: reinstall with a C compiler "
             "(pip install -e .)")

# Values that are not plain 64-bit integers go to the engine as this one, which every check
# refuses; the refusal's text then shows the value as given (its repr).
_SENTINEL = -(2 ** 63)
_KINDS = {EAGER: 0, RNDV: 1}
# the names of the C engine's message kinds, NIC ops and NIC completions, in its enums' order
# (native/generated/spec_constants.h's VS_SPEC_TAGMATCH_*_NAMES are written from these)
KIND_NAMES = (EAGER, RNDV)
OP_KINDS = ("add", "remove", "sync")
CQE_KINDS = ("match", "unexpected", "removed")


def module() -> ModuleType:
    """The compiled engine; ValueError saying so where it was not built."""
    mod = native_pkg.load("tagmatch")
    if mod is None:
        raise ValueError(NOT_BUILT)
    return mod


_TOP = 2 ** 63
_NOTHING = Emitted()


def _plain(value: Any) -> bool:
    """A value the engine takes as it is: an int (not a bool) of 64 bits, not the sentinel."""
    return type(value) is int and _SENTINEL < value < _TOP


# (bit, field, int32 words per item) of the output record, in Emitted's order
_FIELDS = ((1, "sends", 6), (2, "matches", 2), (4, "revoked", 2), (8, "cancelled", 1),
           (16, "completions", 2), (32, "reads", 3), (64, "fins", 1), (128, "released", 1),
           (256, "probe", 1))
# for each value of the record's kinds bits, the fields it names
_SET = tuple(tuple(f for f in _FIELDS if k & f[0]) for k in range(1 << len(_FIELDS)))
_EMPTY = {name: () for _, name, _ in _FIELDS}
_OFFSETS: dict[int, dict[str, int]] = {}


def _offsets(ffi: Any) -> dict[str, int]:
    """Each field's index in the output record read as int32 words (per compiled module)."""
    found = _OFFSETS.get(id(ffi))
    if found is None:
        names = ["kinds", *(n for _, f, _ in _FIELDS for n in ("n" + f, f))]
        found = _OFFSETS[id(ffi)] = {n: ffi.offsetof("vs_tag_out", n) // 4 for n in names}
    return found


class NativeTagEngine:
    """The senders and the receiver of one job, run by the C engine."""

    def __init__(self, cfg: Params, mod: ModuleType | None = None):
        self.mod = mod if mod is not None else module()
        self.cfg = cfg
        ffi, lib = self.mod.ffi, self.mod.lib
        c = ffi.new("vs_tag_config *", {
            "senders": cfg.senders, "messages": cfg.messages, "tags": cfg.tags,
            "comms": cfg.comms, "max_bytes": cfg.max_bytes, "eager_limit": cfg.eager_limit,
            "capacity": cfg.capacity})
        out = ffi.new("vs_tag **")
        rc = lib.vs_tag_create(c, out)
        if rc != lib.VS_TAG_OK:
            raise (MemoryError if rc == lib.VS_TAG_NOMEM else EngineError)(
                f"the native engine refuses the configuration {cfg}")
        self._adopt(out[0])

    def _adopt(self, ptr: Any) -> None:
        ffi, lib = self.mod.ffi, self.mod.lib
        self._e = ffi.gc(ptr, lib.vs_tag_destroy)
        # the engine's output record (all int32 fields) read as one int32 array in place
        out = lib.vs_tag_emitted(self._e)
        self._out = memoryview(ffi.buffer(out, ffi.sizeof("vs_tag_out"))).cast("i")
        self._at = _offsets(ffi)
        self._view = ffi.new("vs_tag_view *")

    def reset(self) -> None:
        """Start a new job on the same engine (as a new engine, keeping its memory)."""
        self.mod.lib.vs_tag_reset(self._e)

    def __deepcopy__(self, memo: dict) -> NativeTagEngine:
        ffi, lib = self.mod.ffi, self.mod.lib
        out = ffi.new("vs_tag **")
        if lib.vs_tag_clone(self._e, out) != lib.VS_TAG_OK:
            raise MemoryError("the native engine could not be copied")
        new = object.__new__(type(self))
        new.mod, new.cfg = self.mod, self.cfg
        new._adopt(out[0])
        memo[id(self)] = new
        return new

    # ------------------------------------------------------------------ calls
    def _args(self, values: tuple[Any, ...]) -> list[int]:
        return [v if type(v) is int and _SENTINEL < v < _TOP else _SENTINEL for v in values]

    def _call(self, fn: Any, *values: Any) -> Emitted:
        rc = fn(self._e, *self._args(values))
        if rc != 0:
            self._refused(rc, values)
        return self._emitted()

    def _refused(self, rc: int, values: tuple[Any, ...], packet: Packet | None = None) -> None:
        ffi, lib = self.mod.ffi, self.mod.lib
        text = ffi.string(lib.vs_tag_error(self._e)).decode()
        if rc == lib.VS_TAG_NOMEM:
            raise MemoryError(text)
        arg = lib.vs_tag_error_arg(self._e)
        if 0 <= arg < len(values) and not _plain(values[arg]):
            text = text.replace(str(_SENTINEL), repr(values[arg]), 1)
        elif arg == lib.VS_TAG_ARG_PACKET and packet is not None:
            # the engine wrote the packet it was given with the values it was given
            kind = packet.kind if packet.kind in _KINDS else "?"
            shown = Packet(*self._args((packet.mid, packet.comm, packet.src, packet.tag,
                                        packet.nbytes)), kind)
            text = text.replace(repr(shown), repr(packet), 1)
        raise EngineError(text)

    def _emitted(self) -> Emitted:
        o, at = self._out, self._at
        kinds = o[at["kinds"]]
        if not kinds:
            return _NOTHING
        got = dict(_EMPTY)
        for _, name, width in _SET[kinds]:
            n, base = o[at["n" + name]], at[name]
            got[name] = tuple(o[base:base + n]) if width == 1 else tuple(
                tuple(o[i:i + width]) for i in range(base, base + n * width, width))
        if kinds & 1:
            got["sends"] = tuple(Packet(*p[:5], KIND_NAMES[p[5]]) for p in got["sends"])
        if kinds & 32:
            got["reads"] = tuple(Read(*r) for r in got["reads"])
        if kinds & 256:
            mid = o[at["probe"]]
            got["probe"] = (mid if mid >= 0 else None,)
        # the same value Emitted(**got) builds, without the frozen dataclass's per-field
        # __init__ (the costliest part of a call)
        out = object.__new__(Emitted)
        out.__dict__.update(got)
        return out

    # ------------------------------------------------------------------ senders
    def send(self, sender: int, comm: int, tag: int, nbytes: int) -> Emitted:
        return self._call(self.mod.lib.vs_tag_send, sender, comm, tag, nbytes)

    def fin(self, mid: int) -> Emitted:
        return self._call(self.mod.lib.vs_tag_fin, mid)

    # ------------------------------------------------------------------ the receiver
    def delivered(self, p: Packet) -> Emitted:
        values = (p.mid, p.comm, p.src, p.tag, p.nbytes)
        rc = self.mod.lib.vs_tag_delivered(self._e, *self._args(values),
                                           _KINDS.get(p.kind, len(_KINDS)))
        if rc != 0:
            self._refused(rc, values, p)
        return self._emitted()

    def post_recv(self, comm: int, src: int, tag: int, nbytes: int) -> Emitted:
        return self._call(self.mod.lib.vs_tag_post_recv, comm, src, tag, nbytes)

    def cancel(self, rid: int) -> Emitted:
        return self._call(self.mod.lib.vs_tag_cancel, rid)

    def probe(self, comm: int, src: int, tag: int) -> Emitted:
        return self._call(self.mod.lib.vs_tag_probe, comm, src, tag)

    # ------------------------------------------------------------------ rendezvous
    def start_read(self, mid: int) -> Emitted:
        return self._call(self.mod.lib.vs_tag_start_read, mid)

    def read_done(self, mid: int) -> Emitted:
        return self._call(self.mod.lib.vs_tag_read_done, mid)

    def send_fin(self, mid: int) -> Emitted:
        return self._call(self.mod.lib.vs_tag_send_fin, mid)

    # ------------------------------------------------------------------ offload
    def hw_op(self) -> Emitted:
        return self._call(self.mod.lib.vs_tag_hw_op)

    def sw_complete(self) -> Emitted:
        return self._call(self.mod.lib.vs_tag_sw_complete)

    def sw_sync(self) -> Emitted:
        return self._call(self.mod.lib.vs_tag_sw_sync)

    # ------------------------------------------------------------------ the view
    def view(self) -> EngineView:
        ffi, lib = self.mod.ffi, self.mod.lib
        v = self._view
        if lib.vs_tag_get_view(self._e, v) != lib.VS_TAG_OK:
            raise MemoryError(ffi.string(lib.vs_tag_error(self._e)).decode())

        def ints(ptr: Any, n: int) -> tuple[int, ...]:
            return tuple(ffi.unpack(ptr, n)) if n else ()

        posted = ints(v.posted, v.nposted)
        if v.offload:
            where = ints(v.where, v.nposted)
            hw = ints(v.hw, v.nhw)
            claims = tuple((c.rid, c.mid, bool(c.cancelling)) for c in v.claims[0:v.nclaims])
            ops = tuple((OP_KINDS[o.kind], o.count, o.rid if o.rid >= 0 else None)
                        for o in v.ops[0:v.nops])
            cq = tuple((CQE_KINDS[c.kind], c.rid if c.rid >= 0 else None,
                        c.mid if c.mid >= 0 else None, bool(c.ok)) for c in v.cq[0:v.ncq])
            counts = (v.sw_count, v.sent_count, v.reported, v.synced)
        else:
            where, hw, claims, ops, cq, counts = (), (), (), (), (), (0, 0, 0, 0)
        return EngineView(ints(v.status, v.nrecvs), ints(v.completion, v.nrecvs),
                          ints(v.stage, v.nmsgs), ints(v.released, v.nmsgs), posted,
                          ints(v.unexpected, v.nunexpected), where, hw, claims, ops, cq,
                          counts)


def native(cfg: Params) -> NativeTagEngine:
    """The factory of ``--impl native``: ValueError where the engine was not built."""
    return NativeTagEngine(cfg, module())
