"""The tag-matching protocol's modes (spec/modes.py): more than one sender, communicator or
tag, rendezvous beside eager, the hardware offload and its hand-over, cancel and probe."""

from __future__ import annotations

from verbspec.spec.modes import Mode, mode
from verbspec.spec.tagmatch.system import TagMatchSystem as T

MODES: tuple[Mode, ...] = (
    mode("two senders", lambda p: p.senders > 1, T.do_send),
    mode("two communicators", lambda p: p.comms > 1, T.do_send),
    mode("two tags", lambda p: p.tags > 1, T.do_send),
    mode("eager", lambda p: p.eager_limit > 0, T.do_deliver),
    mode("rendezvous", lambda p: p.max_bytes > p.eager_limit, T.do_rndv_read_done),
    mode("hardware offload", lambda p: p.capacity > 0, T.do_hw_op),
    mode("offload hand-over to software", lambda p: p.capacity > 0, T.do_sw_sync),
    mode("cancel", lambda p: p.cancel > 0, T.do_cancel),
    mode("probe", lambda p: p.probe > 0, T.do_probe),
)
