"""UCX's own tag matching as a partial ``TagImpl``: the receiver is a UCX worker driven by the
shim ``native/ucx/ucx_tag_shim.c`` (one context and worker over the ``self`` transport, an
endpoint to itself per sender), so what is held to the spec is UCX's matching of posted
receives and unexpected messages, its cancel, probe and truncation, not a model of them.

How the spec's steps reach UCX:

- ``send`` is recorded; the UCX send is issued when the spec delivers the message
  (``delivered``), and the worker is progressed until UCX has taken it, so UCX sees messages
  arrive in the spec's order. The envelope travels in the 64-bit UCX tag (communicator, source
  and tag fields: ``native/ucx/ucx_tag_shim.h``); ANY_SOURCE and ANY_TAG clear the field in the
  receive's mask.
- A message's id travels in its length and payload. With ``K`` messages in the job, a message
  of ``n`` spec bytes is ``n*K + mid`` UCX bytes, each equal to ``mid % 256``, and a receive of
  ``b`` spec bytes has a buffer of ``b*K + K-1``: UCX truncates exactly when ``n > b``, and the
  length UCX reports (also for a truncated receive, whose buffer UCX leaves empty, and for a
  probe) gives back ``mid`` and ``n``.
- ``post_recv``, ``cancel`` and ``probe`` are ``ucp_tag_recv_nbx``, ``ucp_request_cancel`` and
  ``ucp_tag_probe_nb``; after each call the receives UCX completed are the step's matches,
  completions (UCS_OK or UCS_ERR_MESSAGE_TRUNCATED) and cancels (UCS_ERR_CANCELED).
- The spec's rendezvous is not UCX's: UCX moves these short messages eagerly and completes a
  matched receive at once. A rendezvous message's match is reported when UCX makes it; its
  completion is given at the spec's ``rndv_read_done`` and its send's completion at
  ``fin_arrive``, as UCX reported them.

What is compared, and what UCX cannot show, is ``OBSERVES``. A UCX worker cannot be copied, so
a copy of this implementation (the every-edge sweep copies one per edge) shares its worker and
keeps the calls that made its state: the first call on a copy resets the worker and replays
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from verbspec import native as native_pkg
from verbspec.refimpl.engines.observes import Limit, Observes
from verbspec.refimpl.engines.tagmatch_engine import EAGER, RNDV, Emitted, EngineError, Packet
from verbspec.spec.tagmatch.state import OK, TRUNCATED, Params

NOT_BUILT = ("the UCX shim is not built: install UCX's headers and libraries (Debian: apt "
             "install libucx-dev), then reinstall (pip install -e .)")

OFFLOAD = ("UCX is run over the self transport, without tag-matching offload: the NIC's list, "
           "software's shadow and their sync (hw_op, sw_complete, sw_sync) have no UCX call")
OBSERVES = Observes(
    emitted=("matches", "cancelled", "completions", "released", "probe"),
    view=False,
    limits=(Limit("capacity", 0, OFFLOAD),
            Limit("comms", 1 << 20, "the UCX tag gives communicators 20 bits"),
            Limit("senders", 1 << 20, "the UCX tag gives sources 20 bits"),
            Limit("tags", 1 << 24, "the UCX tag gives tags 24 bits")),
    unobserved=(
        ("sends", "UCX chooses its own protocol (these short messages go eagerly) and shows "
                  "no wire: a send is recorded and issued at the spec's delivery"),
        ("revoked", "only the offload revokes a match, and UCX runs without it"),
        ("reads", "UCX runs a rendezvous inside its own progress: no separate READ step"),
        ("fins", "UCX runs a rendezvous inside its own progress: no separate FIN step"),
        ("view", "UCX keeps its expected and unexpected queues to itself"),
        ("offload", OFFLOAD)))

FAULTS = {"none": 0, "source-bit": 1}   # the shim's planted faults (tests only)
_STATUS = {0: OK, 1: TRUNCATED}
_CANCELED = 2


def module() -> ModuleType:
    """The compiled shim; ValueError saying so where it was not built."""
    mod = native_pkg.load("ucx")
    if mod is None:
        raise ValueError(NOT_BUILT)
    return mod


@dataclass(frozen=True)
class Event:
    """A receive UCX completed, or the message a probe found (slot -1)."""

    slot: int
    status: int
    comm: int
    src: int
    tag: int
    length: int
    fill: int


class Shim:
    """One open UCX worker with ``senders`` endpoints to itself, and the implementation whose
    calls made its state."""

    def __init__(self, senders: int, fault: str = "none", mod: ModuleType | None = None):
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}: expected one of {', '.join(FAULTS)}")
        self.mod = mod if mod is not None else module()
        ffi, lib = self.mod.ffi, self.mod.lib
        cfg = ffi.new("vs_ucx_config *", {"senders": senders, "fault": FAULTS[fault]})
        out, err = ffi.new("vs_ucx **"), ffi.new("char[256]")
        rc = lib.vs_ucx_open(cfg, out, err, 256)
        if rc != lib.VS_UCX_OK:
            raise (MemoryError if rc == lib.VS_UCX_NOMEM else EngineError)(
                ffi.string(err).decode())
        self._u = ffi.gc(out[0], lib.vs_ucx_close)
        self._int = ffi.new("int *")
        self._found = ffi.new("int *")
        self._events = ffi.new("vs_ucx_event[64]")
        self.owner: object | None = None

    def _check(self, rc: int) -> None:
        if rc != self.mod.lib.VS_UCX_OK:
            text = self.mod.ffi.string(self.mod.lib.vs_ucx_error(self._u)).decode()
            raise (MemoryError if rc == self.mod.lib.VS_UCX_NOMEM else EngineError)(text)

    def reset(self) -> None:
        self._check(self.mod.lib.vs_ucx_reset(self._u))

    def post(self, comm: int, src: int, tag: int, length: int) -> int:
        self._check(self.mod.lib.vs_ucx_post(self._u, comm, src, tag, length, self._int))
        return self._int[0]

    def send(self, comm: int, src: int, tag: int, length: int, fill: int) -> int:
        """The send's UCS status (0: UCS_OK)."""
        self._check(self.mod.lib.vs_ucx_send(self._u, comm, src, tag, length, fill,
                                             self._int))
        return self._int[0]

    def cancel(self, slot: int) -> None:
        self._check(self.mod.lib.vs_ucx_cancel(self._u, slot))

    def probe(self, comm: int, src: int, tag: int) -> Event | None:
        msg = self.mod.ffi.new("vs_ucx_event *")
        self._check(self.mod.lib.vs_ucx_probe(self._u, comm, src, tag, self._found, msg))
        return _event(msg) if self._found[0] else None

    def poll(self) -> list[Event]:
        out = []
        while True:
            self._check(self.mod.lib.vs_ucx_poll(self._u, self._events, 64, self._int))
            out.extend(_event(e) for e in self._events[0:self._int[0]])
            if self._int[0] < 64:
                return out


def _event(e: Any) -> Event:
    return Event(e.slot, e.status, e.comm, e.src, e.tag, e.length, e.fill)


class UcxTagEngine:
    """The receiver of one tag-matching job on a UCX worker; the senders are its endpoints."""

    def __init__(self, cfg: Params, shim: Shim):
        self.cfg, self.shim = cfg, shim
        self.unit = max(1, cfg.senders * cfg.messages)   # K: message ids 0..K-1
        self._log: list[tuple[str, tuple]] = []
        self._clear()
        shim.reset()
        shim.owner = self

    def _clear(self) -> None:
        self.sent = [0] * self.cfg.senders
        self.msgs: dict[int, Packet] = {}
        self.recvs: list[tuple[int, int, int, int]] = []
        self.held_completion: dict[int, tuple[int, int]] = {}   # rendezvous mid -> (rid, code)
        self.held_release: set[int] = set()                     # rendezvous mids UCX sent

    def __deepcopy__(self, memo: dict) -> UcxTagEngine:
        new = object.__new__(type(self))
        new.cfg, new.shim, new.unit = self.cfg, self.shim, self.unit
        new._log = list(self._log)
        new._clear()
        memo[id(self)] = new
        return new

    def _own(self) -> None:
        """Make the worker's state this implementation's: reset it and replay the calls."""
        if self.shim.owner is self:
            return
        self.shim.reset()
        self.shim.owner = self
        log, self._log = self._log, []
        self._clear()
        for name, args in log:
            self._call(name, args)

    def _call(self, name: str, args: tuple) -> Emitted:
        self._log.append((name, args))
        return getattr(self, "_" + name)(*args)

    # ------------------------------------------------------------------ the calls
    def send(self, sender: int, comm: int, tag: int, nbytes: int) -> Emitted:
        self._own()
        return self._call("send", (sender, comm, tag, nbytes))

    def delivered(self, packet: Packet) -> Emitted:
        self._own()
        return self._call("delivered", (packet,))

    def post_recv(self, comm: int, src: int, tag: int, nbytes: int) -> Emitted:
        self._own()
        return self._call("post_recv", (comm, src, tag, nbytes))

    def cancel(self, rid: int) -> Emitted:
        self._own()
        return self._call("cancel", (rid,))

    def probe(self, comm: int, src: int, tag: int) -> Emitted:
        self._own()
        return self._call("probe", (comm, src, tag))

    def start_read(self, mid: int) -> Emitted:
        return Emitted()        # UCX has no READ step of its own (not observed)

    def read_done(self, mid: int) -> Emitted:
        self._own()
        return self._call("read_done", (mid,))

    def send_fin(self, mid: int) -> Emitted:
        return Emitted()        # nor a FIN step (not observed)

    def fin(self, mid: int) -> Emitted:
        self._own()
        return self._call("fin", (mid,))

    def hw_op(self) -> Emitted:
        raise EngineError(OFFLOAD)

    def sw_complete(self) -> Emitted:
        raise EngineError(OFFLOAD)

    def sw_sync(self) -> Emitted:
        raise EngineError(OFFLOAD)

    def view(self) -> Any:
        raise EngineError("UCX keeps its expected and unexpected queues to itself: no view")

    # ------------------------------------------------------------------ the steps
    def _send(self, sender: int, comm: int, tag: int, nbytes: int) -> Emitted:
        cfg = self.cfg
        if not 0 <= sender < cfg.senders or self.sent[sender] >= cfg.messages:
            raise EngineError(f"sender {sender!r} has no message left to send")
        mid = sender * cfg.messages + self.sent[sender]
        self.sent[sender] += 1
        self.msgs[mid] = Packet(mid, comm, sender, tag, nbytes,
                                EAGER if nbytes <= cfg.eager_limit else RNDV)
        return Emitted()

    def _delivered(self, p: Packet) -> Emitted:
        if self.msgs.get(p.mid) != p:
            raise EngineError(f"packet {p} was not sent as such: {self.msgs.get(p.mid)}")
        status = self.shim.send(p.comm, p.src, p.tag, p.nbytes * self.unit + p.mid,
                                p.mid % 256)
        if status != 0:
            raise EngineError(f"UCX failed the send of message {p.mid}: UCS status {status}")
        released: tuple[int, ...] = ()
        if p.kind == EAGER:
            released = (p.mid,)
        else:
            self.held_release.add(p.mid)
        return self._completed(released)

    def _post_recv(self, comm: int, src: int, tag: int, nbytes: int) -> Emitted:
        rid = len(self.recvs)
        slot = self.shim.post(comm, src, tag, nbytes * self.unit + self.unit - 1)
        if slot != rid:
            raise EngineError(f"UCX shim gave receive {rid} slot {slot}")
        self.recvs.append((comm, src, tag, nbytes))
        return self._completed()

    def _cancel(self, rid: int) -> Emitted:
        if not isinstance(rid, int) or not 0 <= rid < len(self.recvs):
            raise EngineError(f"receive {rid!r} was never posted")
        self.shim.cancel(rid)
        return self._completed()

    def _probe(self, comm: int, src: int, tag: int) -> Emitted:
        found = self.shim.probe(comm, src, tag)
        done = self._completed()
        mid = None if found is None else self._message(found, "a probe")
        return Emitted(matches=done.matches, cancelled=done.cancelled,
                       completions=done.completions, probe=(mid,))

    def _read_done(self, mid: int) -> Emitted:
        held = self.held_completion.pop(mid, None)
        return Emitted(completions=(held,) if held else ())

    def _fin(self, mid: int) -> Emitted:
        if mid in self.held_release:
            self.held_release.discard(mid)
            return Emitted(released=(mid,))
        return Emitted()

    # ------------------------------------------------------------------ what UCX did
    def _message(self, e: Event, what: str) -> int:
        """The id of the message UCX gave ``what``, checked against what was sent."""
        mid, nbytes = e.length % self.unit, e.length // self.unit
        p = self.msgs.get(mid)
        if p is None or (p.comm, p.src, p.tag, p.nbytes) != (e.comm, e.src, e.tag, nbytes):
            raise EngineError(f"UCX gave {what} a message (comm {e.comm}, source {e.src}, tag "
                              f"{e.tag}, {e.length} bytes) that no sender sent")
        return mid

    def _completed(self, released: tuple[int, ...] = ()) -> Emitted:
        """The receives UCX completed in this step as matches, completions and cancels."""
        matches, cancelled, completions = [], [], []
        for e in self.shim.poll():
            rid = e.slot
            if e.status == _CANCELED:
                cancelled.append(rid)
                continue
            mid = self._message(e, f"receive {rid}")
            if e.status not in _STATUS:
                raise EngineError(f"receive {rid} completed with shim status {e.status}")
            if _STATUS[e.status] == OK and e.fill != mid % 256:
                raise EngineError(f"receive {rid} holds bytes that are not message {mid}'s")
            matches.append((rid, mid))
            if self.msgs[mid].kind == EAGER:
                completions.append((rid, _STATUS[e.status]))
            else:
                self.held_completion[mid] = (rid, _STATUS[e.status])
        return Emitted(matches=tuple(matches), cancelled=tuple(cancelled),
                       completions=tuple(completions), released=released)


class UcxFactory:
    """``--impl ucx``: a UCX engine per job; jobs of the same size take turns on one worker
    (reset between them), so a run does not pay for a UCX context."""

    observes = OBSERVES

    def __init__(self, fault: str = "none"):
        module()
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}: expected one of {', '.join(FAULTS)}")
        self.fault = fault
        self._shims: dict[int, Shim] = {}

    def __call__(self, cfg: Params) -> UcxTagEngine:
        shim = self._shims.get(cfg.senders)
        if shim is None:
            shim = self._shims[cfg.senders] = Shim(cfg.senders, self.fault)
        return UcxTagEngine(cfg, shim)
