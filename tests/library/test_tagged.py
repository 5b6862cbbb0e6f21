"""TaggedEndpoint on the sim transport: two rank processes joined by an RC queue pair and a TCP
side channel. Eager and rendezvous traffic with every payload compared, MPI matching order and
wildcards, cancel, iprobe, truncation, the tag bound; and the device's RC semantics (RNR, READ)
and each fault ending in the documented error, after which the endpoint refuses use."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from verbspec.refimpl.library.tagmatch_endpoint import (
    ANY_SOURCE,
    ANY_TAG,
    TAG_UB,
    TaggedConfig,
    TaggedEndpoint,
    TaggedError,
    TaggedTimeout,
    run_tagged,
)
from verbspec.refimpl.transport.sim_device import (
    WC_RNR_RETRY_EXC_ERR,
    WC_SUCCESS,
    WC_WR_FLUSH_ERR,
    DeviceError,
    SimDevice,
)

CFG = TaggedConfig(eager_limit=1024, bounces=8, max_msg=16384, sq_depth=16, timeout_ms=1500)
LINGER_S = 1.0


def payload(rank: int, i: int, n: int) -> bytes:
    """What rank ``rank`` sends as its message ``i``: a pattern no other message has."""
    block = bytes((rank * 97 + i * 31 + k) & 0xFF for k in range(251))
    return (block * (n // 251 + 1))[:n]


def run(work, args=(None, None), cfg=CFG):
    out = run_tagged(work, args, cfg, timeout_s=30)
    for o in out:
        assert o.error == "", o.error
    return [o.result for o in out]


# ---------------------------------------------------------------------- traffic
SIZES = [0, 1, 64, 1024, 1025, 4096, 40000, 256 * 1024 + 3]


def round_trips(ep: TaggedEndpoint, rank: int, _) -> dict:
    """Half the receives posted before the messages come, half after they arrived."""
    peer = 1 - rank
    early = [ep.irecv(n, peer, i) for i, n in enumerate(SIZES) if i % 2 == 0]
    sends = [ep.isend(payload(rank, i, n), peer, i) for i, n in enumerate(SIZES)]
    got = {i: r.wait() for i, r in zip(range(0, len(SIZES), 2), early, strict=True)}
    # the eager ones have arrived once acknowledged; let the rest's headers land too
    ep.probe(peer, max(i for i in range(len(SIZES)) if i % 2))
    for i in range(1, len(SIZES), 2):
        got[i] = ep.irecv(SIZES[i], peer, i).wait()
    for s in sends:
        assert s.wait().count in SIZES
    return {i: (st.source, st.tag, st.count, st.error, st.data == payload(peer, i, SIZES[i]))
            for i, st in got.items()}


def test_eager_and_rendezvous_round_trips_carry_every_payload():
    for rank, res in enumerate(run(round_trips)):
        assert res == {i: (1 - rank, i, n, "", True) for i, n in enumerate(SIZES)}


def mpi_order(ep: TaggedEndpoint, rank: int, _) -> list:
    if rank == 1:
        # same envelope three times: a rendezvous one between two eager ones
        sends = [ep.isend(payload(1, i, n), 0, 7) for i, n in enumerate((10, 5000, 20))]
        sends += [ep.isend(payload(1, 3, 30), 0, 8), ep.isend(payload(1, 4, 40), 0, 9)]
        for s in sends:
            s.wait()
        return []
    # posted before: ANY_TAG first, then tag 7: the first tag-7 message takes the ANY_TAG one
    first = ep.irecv(100, 1, ANY_TAG)
    second = ep.irecv(10000, ANY_SOURCE, 7)
    a, b = first.wait(), second.wait()
    ep.probe(1, 9)
    # after arrival: ANY_SOURCE and ANY_TAG take the earliest that arrived
    c = ep.irecv(100, ANY_SOURCE, ANY_TAG).wait()
    d = ep.irecv(100, ANY_SOURCE, ANY_TAG).wait()
    e = ep.irecv(100, 1, 9).wait()
    return [(s.tag, s.count, s.data == payload(1, i, s.count))
            for i, s in enumerate((a, b, c, d, e))]


def test_matching_follows_mpi_order_with_wildcards():
    got = run(mpi_order)[0]
    assert got == [(7, 10, True), (7, 5000, True), (7, 20, True), (8, 30, True),
                   (9, 40, True)]


def communicators(ep: TaggedEndpoint, rank: int, _) -> list:
    if rank == 1:
        for s in [ep.isend(b"on comm 1", 0, 5, comm=1), ep.isend(b"on comm 0", 0, 5, comm=0)]:
            s.wait()
        return []
    ep.probe(1, 5, comm=0)
    first = ep.irecv(20, ANY_SOURCE, ANY_TAG, comm=0).wait()
    return [first.data, ep.iprobe(comm=0), ep.irecv(20, 1, 5, comm=1).wait().data]


def test_a_receive_matches_only_its_own_communicator():
    assert run(communicators)[0] == [b"on comm 0", None, b"on comm 1"]


def cancel_and_probe(ep: TaggedEndpoint, rank: int, _) -> dict:
    if rank == 1:
        assert ep.irecv(1, 0, 99).wait().count == 1      # rank 0's go-ahead
        ep.isend(payload(1, 0, 300), 0, 5).wait()
        ep.isend(payload(1, 1, 3000), 0, 6).wait()
        return {}
    out = {"probe_before": ep.iprobe(1, 5)}
    unmatched = ep.irecv(100, 1, 4)
    matched = ep.irecv(300, 1, 5)
    ep.isend(b"!", 1, 99).wait()
    st = matched.wait()
    out["cancel_matched"] = ep.cancel(matched)
    out["matched"] = (st.count, st.cancelled, st.data == payload(1, 0, 300))
    out["cancel_unmatched"] = ep.cancel(unmatched)
    out["unmatched"] = (unmatched.test(), unmatched.wait().cancelled, unmatched.wait().count)
    probe = ep.probe(ANY_SOURCE, ANY_TAG)
    out["probe"] = (probe.source, probe.tag, probe.count, probe.data)
    out["probe_again"] = ep.iprobe(1, 6).count
    st = ep.irecv(3000, 1, 6).wait()
    out["after_probe"] = (st.count, st.data == payload(1, 1, 3000), ep.iprobe())
    return out


def test_cancel_takes_only_unmatched_receives_and_iprobe_leaves_the_message():
    got = run(cancel_and_probe)[0]
    assert got == {"probe_before": None, "cancel_matched": False, "matched": (300, False, True),
                   "cancel_unmatched": True, "unmatched": (True, True, 0),
                   "probe": (1, 6, 3000, b""), "probe_again": 3000,
                   "after_probe": (3000, True, None)}


def truncation(ep: TaggedEndpoint, rank: int, _) -> list:
    if rank == 1:
        for s in [ep.isend(payload(1, 0, 800), 0, 1), ep.isend(payload(1, 1, 9000), 0, 2)]:
            s.wait()
        return []
    got = (ep.irecv(100, 1, 1).wait(), ep.irecv(500, 1, 2).wait())
    return [(st.count, st.truncated, st.error, st.data == payload(1, i, n)[:st.count])
            for i, (st, n) in enumerate(zip(got, (800, 9000), strict=True))]


def test_a_message_longer_than_the_receive_is_truncated_with_the_mpi_error():
    """Eager and rendezvous: the status carries MPI_ERR_TRUNCATE and the message's prefix."""
    assert run(truncation)[0] == [
        (100, True, "MPI_ERR_TRUNCATE: a message of 800 bytes from rank 1 (tag 1) is longer "
                    "than the receive's 100 bytes", True),
        (500, True, "MPI_ERR_TRUNCATE: a message of 9000 bytes from rank 1 (tag 2) is longer "
                    "than the receive's 500 bytes", True)]


def refusals(ep: TaggedEndpoint, rank: int, _) -> list[str]:
    out = []
    for call in (lambda: ep.isend(b"x", 1 - rank, TAG_UB + 1), lambda: ep.isend(b"x", 1 - rank,
                                                                                  -1),
                 lambda: ep.irecv(1, 1 - rank, -2), lambda: ep.irecv(1, 1 - rank, TAG_UB + 1),
                 lambda: ep.isend(b"x", 5, 0),
                 lambda: ep.irecv(1, 1 - rank, 0, comm=-1)):
        try:
            call()
        except TaggedError as e:
            out.append(str(e))
    # a refused call leaves the endpoint usable
    r = ep.irecv(4, 1 - rank, TAG_UB)
    ep.isend(b"ok!!", 1 - rank, TAG_UB).wait()
    out.append(r.wait().data.decode())
    return out


def test_tags_outside_the_bound_and_bad_ranks_are_refused_as_mpi_refuses_them():
    got = run(refusals)[0]
    assert got == [
        f"MPI_ERR_TAG: isend: invalid tag {TAG_UB + 1}: tags are 0..2147483647 (MPI_TAG_UB)",
        "MPI_ERR_TAG: isend: invalid tag -1: tags are 0..2147483647 (MPI_TAG_UB)",
        "MPI_ERR_TAG: irecv: invalid tag -2: tags are 0..2147483647 (MPI_TAG_UB) or ANY_TAG",
        f"MPI_ERR_TAG: irecv: invalid tag {TAG_UB + 1}: tags are 0..2147483647 (MPI_TAG_UB) "
        "or ANY_TAG",
        "MPI_ERR_RANK: isend: invalid rank 5: this endpoint (rank 0) reaches ranks [1]",
        "MPI_ERR_COMM: irecv: invalid communicator -1: communicators are 0..2147483647",
        "ok!!"]


def many_small(ep: TaggedEndpoint, rank: int, n: int) -> tuple[int, int]:
    """More messages than the peer has bounce buffers, none received until all are sent:
    the credits hold the sender back, and nothing meets RNR."""
    peer = 1 - rank
    sends = [ep.isend(payload(rank, i, 100), peer, i % 3) for i in range(n)]
    wrong = 0
    for i in range(n):
        st = ep.irecv(100, peer, ANY_TAG).wait()
        wrong += st.data != payload(peer, i, 100) or st.tag != i % 3
    for s in sends:
        s.wait()
    return wrong, ep.counts["credit_reads"]


def test_credits_keep_a_burst_from_meeting_rnr():
    for wrong, reads in run(many_small, (60, 60)):
        assert wrong == 0 and reads > 0


# ---------------------------------------------------------------------- the device: RC
def rc_pair(**kw) -> tuple[SimDevice, SimDevice]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    return tuple(SimDevice(w, {"m": bytearray(200_000), "r": bytearray(200_000)}, cq_depth=16,
                           max_msg=150_000, rq_depth=4, sq_depth=4, **kw) for w in (a, b))


def poll_until(dev: SimDevice, n: int) -> list:
    got, deadline = [], time.monotonic() + 5
    while len(got) < n and time.monotonic() < deadline:
        got += dev.poll(n - len(got), 0.05)
    return got


def test_rc_send_without_a_receive_is_answered_rnr_and_the_qp_enters_error():
    a, b = rc_pair(qp_type="rc")
    try:
        b.post_recv([(7, "r", 0, 100)])
        a.post_send([(1, "m", 0, 10, True)])
        assert [(c.opcode, c.wr_id, c.status) for c in poll_until(a, 1)] == [("send", 1,
                                                                               WC_SUCCESS)]
        a.post_send([(2, "m", 0, 10, True)])        # b has no receive posted
        assert [(c.wr_id, c.status) for c in poll_until(a, 1)] == [(2, WC_RNR_RETRY_EXC_ERR)]
        assert a.state == "error" and b.rnr_naks == 1
        a.post_send([(3, "m", 0, 10, True)])
        assert [(c.wr_id, c.status) for c in poll_until(a, 1)] == [(3, WC_WR_FLUSH_ERR)]
        assert [(c.wr_id, c.status) for c in poll_until(b, 1)] == [(7, WC_SUCCESS)]
    finally:
        a.close()
        b.close()


def test_uc_send_without_a_receive_completes_and_is_dropped():
    a, b = rc_pair()
    try:
        a.post_send([(1, "m", 0, 10, True)])
        assert [(c.wr_id, c.status) for c in poll_until(a, 1)] == [(1, WC_SUCCESS)]
        deadline = time.monotonic() + 5
        while b.dropped == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert b.dropped == 1
    finally:
        a.close()
        b.close()


def test_rdma_read_lands_the_peers_bytes_and_is_refused_on_uc():
    a, b = rc_pair(qp_type="rc")
    try:
        b.regions["m"][:] = os.urandom(200_000)
        a.post_read(9, "r", 5, "m", 1000, 140_000)     # three response frames
        assert [(c.opcode, c.wr_id, c.status, c.byte_len) for c in poll_until(a, 1)] == [
            ("read", 9, WC_SUCCESS, 140_000)]
        assert a.regions["r"][5:140_005] == b.regions["m"][1000:141_000]
        a.post_read(10, "r", 0, "nowhere", 0, 8)
        assert [(c.wr_id, c.status) for c in poll_until(a, 1)] == [(10, 9)]
    finally:
        a.close()
        b.close()
    u, v = rc_pair()
    try:
        with pytest.raises(DeviceError, match="RDMA READ needs a reliable connection \\(RC\\); "
                                              "this queue pair is UC"):
            u.post_read(1, "r", 0, "m", 0, 8)
    finally:
        u.close()
        v.close()


# ---------------------------------------------------------------------- faults
def expect_failure(ep: TaggedEndpoint, rank: int, fault) -> dict:
    """Run ``fault(ep, rank)``; its TaggedError's text, how long it took, and what a later
    call says. The process stays up a while after, so its exit is not what the peer sees."""
    t = time.monotonic()
    try:
        fault(ep, rank)
    except TaggedError as e:
        first, took, kind = str(e), time.monotonic() - t, type(e).__name__
    else:
        return {"error": None}
    try:
        ep.isend(b"x", 1 - rank, 0)
    except TaggedError as e:
        after = str(e)
    else:
        after = None
    time.sleep(LINGER_S)
    return {"error": first, "took": took, "after": after, "type": kind}


def crash_after_one(ep: TaggedEndpoint, rank: int) -> None:
    peer = 1 - rank
    r = ep.irecv(2000, peer, 1)
    ep.isend(payload(rank, 0, 2000), peer, 1).wait()
    assert r.wait().data == payload(peer, 0, 2000)
    ep.isend(payload(rank, 1, 500), peer, 1).wait()      # eager: acknowledged, nothing owed
    assert ep.irecv(500, peer, 1).wait().data == payload(peer, 1, 500)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    ep.irecv(10, peer, 2).wait()


def test_a_dead_peer_ends_a_wait_in_the_documented_error_within_the_timeout():
    out = run_tagged(expect_failure, (crash_after_one, crash_after_one), CFG, timeout_s=30)
    assert out[1].exitcode == -signal.SIGKILL
    r0 = out[0].result
    assert r0["error"] == ("peer rank 1 is gone (its wire closed: the process died or closed "
                           "its endpoint) while a receive from rank 1 (tag 2, comm 0) waited")
    assert r0["took"] < CFG.timeout_ms / 1000
    assert r0["after"].startswith("the endpoint failed (peer rank 1 is gone")


def error_completion(ep: TaggedEndpoint, rank: int) -> None:
    if rank == 0:
        ep.peers[1].device.fail_next_work_requests(1)
        ep.isend(payload(0, 0, 100), 1, 3).wait()
    else:
        ep.irecv(100, 0, 3).wait(0.5)


def test_an_error_completion_fails_the_request_and_the_endpoint():
    out = run_tagged(expect_failure, (error_completion, error_completion), CFG, timeout_s=30)
    r0, r1 = out[0].result, out[1].result
    assert r0["error"] == ("rdma completion error: remote invalid request error (9) on a send "
                           "to or from rank 1 (wr_id 0x1000000000000000)")
    assert r0["after"] == ("the endpoint failed (rdma completion error: remote invalid request "
                           "error (9) on a send to or from rank 1 (wr_id 0x1000000000000000)): "
                           "set the endpoint up again")
    # the message never left: the peer's receive ends at its timeout
    assert r1["error"] == "timeout: the receive from rank 0 (tag 3, comm 0) did not complete " \
                          "within 500 ms"
    assert r1["after"].startswith("the endpoint failed (timeout")


def drop_one(ep: TaggedEndpoint, rank: int) -> None:
    if rank == 1:
        ep.peers[0].device.drop_next_sends(1)
        first = ep.isend(payload(1, 0, 50), 0, 1)
        ep.isend(payload(1, 1, 50), 0, 2).wait(0.3)
        first.wait(0.5)
    else:
        ep.irecv(50, 1, ANY_TAG).wait()


def test_a_lost_message_is_caught_never_accepted():
    """The first message vanishes on the wire; the second lands, and its sequence number
    shows the gap. The sender's lost send is never acknowledged: its wait times out."""
    out = run_tagged(expect_failure, (drop_one, drop_one), CFG, timeout_s=30)
    assert out[0].result["error"] == ("a message from rank 1: expected message 1, got 2: a "
                                      "message was lost or reordered")
    assert out[1].result["error"] == ("timeout: the send of 50 bytes to rank 0 (tag 1, comm 0) "
                                      "did not complete within 500 ms")


def nobody_sends(ep: TaggedEndpoint, rank: int) -> None:
    ep.irecv(10, 1 - rank, 1).wait(0.2)


def probe_nothing(ep: TaggedEndpoint, rank: int) -> None:
    ep.probe(1 - rank, 3, timeout=0.2)


def test_a_probe_for_a_message_nobody_sends_times_out():
    for o in run_tagged(expect_failure, (probe_nothing, probe_nothing), CFG, timeout_s=30):
        assert o.result["error"] == (f"timeout: the probe for rank {1 - o.rank} (tag 3, comm 0) "
                                     f"did not complete within 200 ms")
        assert o.result["type"] == TaggedTimeout.__name__


def test_a_wait_past_its_timeout_fails_and_the_endpoint_refuses_use():
    out = run_tagged(expect_failure, (nobody_sends, nobody_sends), CFG, timeout_s=30)
    for o in out:
        assert o.error == "", o.error
        assert o.result["error"] == ("timeout: the receive from rank "
                                     f"{1 - o.rank} (tag 1, comm 0) did not complete within "
                                     f"200 ms")
        assert 0.2 <= o.result["took"] < 1.0
        assert o.result["type"] == TaggedTimeout.__name__
        assert o.result["after"] == ("the endpoint failed (timeout: the receive from rank "
                                     f"{1 - o.rank} (tag 1, comm 0) did not complete): set the "
                                     "endpoint up again")


def test_ranks_with_different_configurations_refuse_each_other():
    def other(pair, rank, _):
        from verbspec.refimpl.library.tagmatch_endpoint import open_endpoint
        cfg = CFG if rank == 0 else TaggedConfig(eager_limit=2048, bounces=8, max_msg=16384,
                                                 sq_depth=16, timeout_ms=1500)
        try:
            open_endpoint(pair, rank, cfg)
        except TaggedError as e:
            return str(e)
        return None

    from verbspec.refimpl.library.sim_pair import run_pair
    out = run_pair(other, (None, None), timeout_s=30)
    assert out[0].result == ("rank 1 has eager_limit=2048, bounces=8, max_msg=16384; this rank "
                             "has 1024, 8, 16384: a job's ranks must agree")


def test_configuration_is_validated():
    with pytest.raises(TaggedError, match=r"bounces=0: expected an integer in 1\.\.32768"):
        TaggedConfig(bounces=0)
    with pytest.raises(TaggedError, match=r"timeout_ms=0: expected an integer in 1\.\.60000"):
        TaggedConfig(timeout_ms=0)
    with pytest.raises(TaggedError, match=r"timeout_ms=60001: expected an integer in 1\.\."):
        TaggedConfig(timeout_ms=60001)
    with pytest.raises(TaggedError, match=r"sq_depth=10{30}: expected an integer in 2\.\."):
        TaggedConfig(sq_depth=10**30)
    with pytest.raises(TaggedError, match="bounces=True: expected an integer"):
        TaggedConfig(bounces=True)
    with pytest.raises(TaggedError, match="eager_limit=70000: a 60-byte header"):
        TaggedConfig(eager_limit=70000)


def rnr(ep: TaggedEndpoint, rank: int) -> None:
    """Rank 1 believes rank 0 has more buffers posted than it has, and sends a burst while
    rank 0 is not receiving: the burst outruns rank 0's buffers and meets RNR."""
    if rank == 1:
        ep.peers[0].bounces += 4
        sends = [ep.isend(payload(1, i, 10), 0, 1) for i in range(CFG.bounces + 4)]
        for s in sends:
            s.wait()
    else:
        time.sleep(0.5)
        ep.irecv(10, 1, 2).wait(0.3)


def test_rnr_fails_the_send_and_the_endpoint():
    out = run_tagged(expect_failure, (rnr, rnr), CFG, timeout_s=30)
    r1 = out[1].result
    assert r1["error"].startswith("rdma completion error: RNR retry counter exceeded (13) on a "
                                  "send to or from rank 0 (wr_id ")
    assert r1["after"].startswith("the endpoint failed (rdma completion error: RNR")


def overflow(ep: TaggedEndpoint, rank: int) -> None:
    if rank == 0:
        ep.peers[1].device.overflow_cq()
    ep.irecv(10, 1 - rank, 1).wait(0.3)


def test_a_cq_overflow_fails_the_endpoint():
    r0 = run_tagged(expect_failure, (overflow, overflow), CFG, timeout_s=30)[0].result
    assert r0["error"] == (f"device: completion queue overflow: {CFG.cq_depth} entries held and "
                           f"one more arrived (the device is in error)")
    assert r0["after"].startswith("the endpoint failed (device: completion queue overflow")
