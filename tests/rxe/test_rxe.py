"""The real-verbs tier: a qemu guest with soft-RoCE (rdma_rxe) devices, and the fabric facts
the spec's UC and RC rules rest on, observed there (docs/verbs.md). Run with ``pytest -m rxe``;
without qemu, busybox-static, the kernel package or python3-pyverbs each test skips saying which,
and fails instead under VERBSPEC_REQUIRE_RXE=1."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import require

from verbspec.refimpl.rxe import facts as verbs_facts
from verbspec.refimpl.rxe import guest as rg

pytestmark = pytest.mark.rxe

#: sender and receiver devices: two rxe devices across the veth pair, and one on lo
LINKS = {"veth": ("rxe0", "rxe1"), "lo": ("rxe_lo", "rxe_lo")}


def test_the_guest_runs_a_command_in_the_checkout_and_returns_its_code_and_output(rxe_guest):
    res = rxe_guest.run(["sh", "-c", "test -f pyproject.toml && echo out; echo err >&2; exit 7"])
    assert (res.returncode, res.stdout, res.stderr) == (7, "out\n", "err\n")


def test_a_command_past_its_timeout_is_ended_and_the_guest_goes_on(rxe_guest):
    res = rxe_guest.run(["sleep", "60"], timeout=2)
    assert res.returncode == 124 and res.seconds < 30
    assert rxe_guest.run(["true"]).returncode == 0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"argv": []}, "argv is empty"),
    ({"argv": ["true"], "timeout": 0}, "timeout must be positive, got 0"),
    ({"argv": ["true"], "env": {"A-B": "1"}}, "environment name 'A-B' is not a shell identifier"),
])
def test_run_refuses_bad_arguments_naming_them(rxe_guest, kwargs, message):
    with pytest.raises(ValueError, match=message):
        rxe_guest.run(**kwargs)


def test_the_guest_has_the_rxe_devices_up(rxe_guest):
    res = rxe_guest.run(["rdma", "link", "show"])
    assert res.returncode == 0, res.stderr
    for dev, netdev in rg.RXE_LINKS.items():
        assert f"link {dev}/1 state ACTIVE" in res.stdout and f"netdev {netdev}" in res.stdout


def test_the_guest_sees_the_same_python_and_the_built_package(rxe_guest):
    probe = "import sys, verbspec.refimpl.rxe.guest as m; print(sys.prefix); print(m.__file__)"
    res = rxe_guest.run([sys.executable, "-c", probe])
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [sys.prefix, rg.__file__]


@pytest.fixture(scope="module", params=sorted(LINKS))
def facts(request, rxe_guest) -> dict:
    """verbs_facts run in the guest over one link; its JSON."""
    try:
        pyverbs = rg.pyverbs_path()
    except rg.MissingPrerequisite as exc:
        require("rxe", str(exc))
    sender, receiver = LINKS[request.param]
    res = rxe_guest.run([sys.executable, "-m", "verbspec.refimpl.rxe.facts",
                         "--sender", sender, "--receiver", receiver],
                        env={"PYTHONPATH": str(pyverbs)}, timeout=300)
    assert res.returncode == 0, f"verbs_facts failed ({res.returncode}):\n{res.stderr}"
    return json.loads(res.stdout)


def test_uc_send_that_finds_no_receive_completes_at_the_sender_and_is_not_delivered(facts):
    uc = facts["uc"]
    assert uc["unreceived_send"] == {"wr_id": 1, "status": "IBV_WC_SUCCESS",
                                     "opcode": "IBV_WC_SEND",
                                     "byte_len": len(verbs_facts.FIRST)}
    assert uc["delivered_while_unposted"] == []
    assert uc["later_completions"] == []


def test_uc_next_send_after_a_posted_receive_is_delivered_with_its_own_payload(facts):
    uc = facts["uc"]
    assert uc["next_send"]["status"] == "IBV_WC_SUCCESS"
    assert uc["next_recv"] == {"wr_id": 2, "status": "IBV_WC_SUCCESS", "opcode": "IBV_WC_RECV",
                               "byte_len": len(verbs_facts.SECOND)}
    assert uc["next_payload"] == verbs_facts.SECOND.decode()


def test_rc_send_that_finds_no_receive_fails_at_the_sender_with_rnr_retry_exceeded(facts):
    rc = facts["rc"]
    assert rc["unreceived_send"]["wr_id"] == 1
    assert rc["unreceived_send"]["status"] == "IBV_WC_RNR_RETRY_EXC_ERR"
    assert rc["receiver_completions"] == []
    assert rc["sender_qp_state"] == "IBV_QPS_ERR"
