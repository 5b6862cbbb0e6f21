"""The fabric model on its own, with more than one connection: each connection's QPs, wire and
TCP stream are its own, and UC and RC keep their rules on every connection."""

from __future__ import annotations

import pytest

from verbspec.spec import fabric as fb

RECV = fb.RecvWR(wr_id=7, buf="in", slot=0, offset=0, length=64, want=None)


def send(wr_id: int, length: int = 32) -> fb.SendWR:
    return fb.SendWR(wr_id=wr_id, buf="out", slot=0, offset=0, length=length, signaled=True,
                     payload=("msg", wr_id))


def test_each_connection_delivers_to_its_own_peer_only():
    fab = fb.new_fabric("uc", unsignaled_completions=False, connections=3)
    assert len(fab.qps) == len(fab.wire) == len(fab.tcp) == 6
    fab = fb.post_recv(fab, 5, (RECV,))
    fab = fb.post_send(fab, 4, (send(1),))
    fab = fb.transmit(fab, 4, cq_depth=8)
    fab, got = fb.deliver(fab, 4, cq_depth=8, receiver_alive=True)
    assert got.outcome == "landed" and got.wr == RECV
    assert [e.opcode for e in fab.qps[4].cq] == ["send"]
    assert [(e.wr_id, e.byte_len, e.status) for e in fab.qps[5].cq] == [(7, 32, fb.ST_OK)]
    untouched = fb.new_fabric("uc", unsignaled_completions=False, connections=3)
    assert fab.qps[:4] == untouched.qps[:4] and fab.wire[:4] == untouched.wire[:4]


def test_uc_drops_on_one_connection_while_another_has_receives_posted():
    fab = fb.new_fabric("uc", unsignaled_completions=True, connections=2)
    fab = fb.post_recv(fab, 1, (RECV,))         # connection 0 has a receive; connection 1 none
    fab = fb.post_send(fab, 2, (send(9),))
    fab = fb.transmit(fab, 2, cq_depth=8)
    fab, got = fb.deliver(fab, 2, cq_depth=8, receiver_alive=True)
    assert got.outcome == "uc_drop"
    assert fab.qps[1].rq == (RECV,) and fab.qps[3].cq == ()
    assert [e.status for e in fab.qps[2].cq] == [fb.ST_OK]     # UC: the sender never knows


def test_rc_rnr_fails_the_sender_of_that_connection_only():
    fab = fb.new_fabric("rc", unsignaled_completions=False, connections=2)
    fab = fb.post_send(fab, 3, (send(1), send(2)))
    fab = fb.transmit(fab, 3, cq_depth=8)
    fab, got = fb.deliver(fab, 3, cq_depth=8, receiver_alive=True)
    assert got.outcome == "rnr"
    assert fab.qps[3].state == "error"
    assert [e.status for e in fab.qps[3].cq] == [fb.ST_RNR, fb.ST_FLUSH]
    assert all(q.state == "rts" and not q.cq for q in fab.qps[:3])


@pytest.mark.parametrize("qp_type", ["uc", "rc"])
def test_a_lost_message_fails_its_send_on_rc_only(qp_type):
    # UC never learns of the loss; RC's retries run out on the lost message, its send fails
    # and the QP flushes what it had not yet sent
    fab = fb.new_fabric(qp_type, unsignaled_completions=False, connections=1)
    fab = fb.post_recv(fab, 1, (RECV,))
    fab = fb.post_send(fab, 0, (send(1), send(2)))
    fab = fb.transmit(fab, 0, cq_depth=8)
    fab = fb.lose(fab, 0, cq_depth=8)
    assert fab.wire[0] == () and fab.qps[1].rq == (RECV,) and fab.qps[1].cq == ()
    if qp_type == "uc":
        assert fab.qps[0].state == "rts"
        assert [(e.wr_id, e.status) for e in fab.qps[0].cq] == [(1, fb.ST_OK)]
    else:
        assert fab.qps[0].state == "error"
        assert [(e.wr_id, e.status) for e in fab.qps[0].cq] == [(1, fb.ST_RETRY),
                                                                (2, fb.ST_FLUSH)]


@pytest.mark.parametrize("fail", ["lose", "rnr", "dead"])
def test_nothing_behind_a_failed_rc_message_lands(fail):
    # the responder accepts nothing past the failed packet sequence number: the messages
    # already on the wire behind it complete flushed, in order, and never reach a receive
    fab = fb.new_fabric("rc", unsignaled_completions=False, connections=1)
    if fail != "rnr":
        fab = fb.post_recv(fab, 1, (RECV, RECV))
    fab = fb.post_send(fab, 0, (send(1), send(2), send(3)))
    for _ in range(3):
        fab = fb.transmit(fab, 0, cq_depth=8)
    if fail == "lose":
        fab = fb.lose(fab, 0, cq_depth=8)
        status = fb.ST_RETRY
    else:
        fab, got = fb.deliver(fab, 0, cq_depth=8, receiver_alive=fail == "rnr")
        assert got.outcome == fail
        status = fb.ST_RNR if fail == "rnr" else fb.ST_RETRY
    assert fab.wire[0] == () and fab.qps[1].cq == ()
    assert fab.qps[0].state == "error"
    assert [(e.wr_id, e.status) for e in fab.qps[0].cq] == [(1, status), (2, fb.ST_FLUSH),
                                                            (3, fb.ST_FLUSH)]


def test_tcp_items_reach_the_peer_of_their_writer():
    fab = fb.new_fabric("uc", unsignaled_completions=True, connections=2)
    fab = fb.tcp_write(fab, 2, "hello")
    fab = fb.tcp_write(fab, 1, "other")
    item, fab = fb.tcp_read(fab, 3)
    assert item == "hello" and fab.tcp[2] == ()
    item, fab = fb.tcp_read(fab, 0)
    assert item == "other"


def test_a_fabric_without_connections_is_refused():
    with pytest.raises(ValueError, match="at least one connection"):
        fb.new_fabric("uc", unsignaled_completions=True, connections=0)
