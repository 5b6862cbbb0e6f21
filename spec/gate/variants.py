"""The gate protocol's named variants: each a documented switch that reproduces a known
weakness, with what it changes and which invariant it breaks."""

from __future__ import annotations

from verbspec.spec.params import Profile, Variant

NO_BARRIER = Variant(
    "no-barrier",
    "arming posts the window's receives and sends at once, without the 0xD1 TCP barrier",
    "no_silent_drop: a first gate reaches a peer that has not posted its window yet; "
    "UC drops it while the sender completes")

TAG_EVERY_CHUNK = Variant(
    "tag-every-chunk",
    "every chunk's receive carries wr_id = seq, not only the last chunk's",
    "watermark_sound: recv_done passes a gate when its first chunk lands")

SIGNAL_LAST_ONLY = Variant(
    "signal-last-only",
    "a gate's send chain signals only its last WR and counts the chain once, while the "
    "provider completes every WR",
    "send_accounting: send_outstanding under-counts, so a drain can end while a send "
    "still reads its buffer")

STRAY_SEND_COMPLETION = Variant(
    "stray-send-completion",
    "every send completion decrements send_outstanding, whatever its tag",
    "send_accounting: a warm-up leftover completion makes send_outstanding under-count")

STRAY_WARM_RECEIVE = Variant(
    "stray-warm-receive",
    "every receive completion raises recv_done to its wr_id, tag bits included",
    "watermark_sound: a warm-up leftover (wr_id 1<<62) lifts recv_done to 2^62 and every "
    "later gate passes without waiting (in a big-gate window it fails the window "
    "instead: no_deadlock)")

NO_SEQ_CHECK = Variant(
    "no-seq-check",
    "gate() accepts any seq, not only last_gate_seq + 1",
    "chunk_alignment: a skipped seq pairs one gate's send with another's receive; a "
    "repeated seq returns at once with stale data (watermark_sound, gate_order)")

DEPTH_MISMATCH = Variant(
    "depth-mismatch",
    "rank 1 is granted a chain_max-deep receive queue and big-gate windows are not "
    "negotiated: each rank uses its own depth",
    "no_silent_drop: rank 0's big-gate window overruns rank 1's receives while the "
    "barrier tags still agree (or the ranks deadlock on the next barrier)")

DRAIN_WITHOUT_RENDEZVOUS = Variant(
    "drain-without-rendezvous",
    "a rank drains its window as soon as its application starts a big gate, before the "
    "big-gate header exchange",
    "no_silent_drop, watermark_sound or no_deadlock: a dummy reaches a peer still "
    "closing its last gate; it is dropped (no receive reposted yet) or reaped as a gate "
    "arrival (raising recv_done past what landed), and the peer's drain never counts "
    "its window")

UNTAGGED_IN_BIG_WINDOW = Variant(
    "untagged-in-big-window",
    "in a big-gate window a receive completion without the BULK tag, a warm-up leftover's "
    "included, raises recv_done to its wr_id instead of failing the window",
    "watermark_sound: a warm-up leftover (wr_id 1<<62) reaped in a big-gate window lifts "
    "recv_done to 2^62, past every gate that landed")

BLOCK_DRAIN_WITHOUT_RENDEZVOUS = Variant(
    "block-drain-without-rendezvous",
    "a verify block begins as ds4_tp_batch_block_begin does: it drains the decode window "
    "at once, with no header exchange before it",
    "no_silent_drop, watermark_sound or no_deadlock: a dummy reaches a peer still closing its "
    "last decode gate, before it reposts that gate's lookahead receive; UC drops it (or the "
    "peer reaps it as a gate arrival, raising recv_done past what landed) and the peer's "
    "drain waits for a receive that never comes")

UNEXCHANGED_CONFIG = Variant(
    "unexchanged-config",
    "the ranks' hello carries neither the receive window nor the message cap, so ranks "
    "built with different values start without a word",
    "chunk_alignment: with different message caps a chunk lands in a receive of another "
    "length; no_silent_drop or chunk_alignment: with different windows a drain sends more "
    "dummies than its peer has lookahead receives, and UC drops the rest or they land in "
    "the peer's next big-gate receives")

VARIANTS: tuple[Variant, ...] = (
    NO_BARRIER,
    TAG_EVERY_CHUNK,
    SIGNAL_LAST_ONLY,
    STRAY_SEND_COMPLETION,
    STRAY_WARM_RECEIVE,
    NO_SEQ_CHECK,
    DEPTH_MISMATCH,
    DRAIN_WITHOUT_RENDEZVOUS,
    UNTAGGED_IN_BIG_WINDOW,
    BLOCK_DRAIN_WITHOUT_RENDEZVOUS,
    UNEXCHANGED_CONFIG,
)

DS4_V14 = Profile(
    "ds4-v14",
    "ds4's ds4_tp.c as written (zzyu17/ds4 at 1c45969, protocol v14): where the spec is "
    "stricter than ds4 and the difference is a variant, the variant",
    (
        (NO_SEQ_CHECK.name, "tp_rdma_gate_exchange, ds4_tp.c 1528: only the slot is checked"),
        (STRAY_WARM_RECEIVE.name,
         "tp_rdma_drain_cq, ds4_tp.c 1328-1330: every receive raises recv_done"),
        (STRAY_SEND_COMPLETION.name,
         "tp_rdma_drain_cq, ds4_tp.c 1331-1333: every send decrements send_outstanding"),
        (DEPTH_MISMATCH.name,
         "tp_rdma_big_gate_exchange, ds4_tp.c 1750: each rank windows by its own depth"),
        (UNTAGGED_IN_BIG_WINDOW.name,
         "tp_rdma_big_gate_exchange, ds4_tp.c 1852-1858: untagged completions are decode "
         "traffic"),
        (BLOCK_DRAIN_WITHOUT_RENDEZVOUS.name,
         "ds4_tp_batch_block_begin, ds4_tp.c 2192: the drain with no exchange before it"),
        (UNEXCHANGED_CONFIG.name,
         "tp_hello_exchange, ds4_tp.c 1963: the hello compares no MAX_MSG or RECV_WINDOW"),
    ),
    # ds4's CQ has 512 entries (ds4_tp.c 945, 1114), three fewer than the spec's default;
    # its warm-up over UC posts a send in each of up to 20 attempts and may leave all their
    # completions unreaped (ds4_tp.c 1043-1062), but succeeds only once its one warm receive
    # is reaped (1076, 1091); its workload has verify blocks (ds4_tp_batch_block_begin)
    params=("cq_depth=512", "warm_send_leftovers=20", "warm_recv_leftover=0",
            "verify_blocks=1"))

PROFILES: tuple[Profile, ...] = (DS4_V14,)
