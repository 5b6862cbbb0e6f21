"""The tag-matching invariants judge matching by MPI's rule stated apart from the list engine's
``envelope_matches`` (spec/tagmatch/invariants.py ``_mpi_matches``): a spec whose matching
lets a wildcard source reach across communicators is refuted by the invariants themselves, not
only by the engines held to it."""

from __future__ import annotations

from verbspec.proofs.search import bounded_search
from verbspec.spec.tagmatch import lists
from verbspec.spec.tagmatch.system import build


def test_wildcard_matching_across_communicators_breaks_an_invariant(monkeypatch):
    def across(r, m):
        return ((r.comm == m.comm or r.src == lists.ANY) and r.src in (lists.ANY, m.src)
                and r.tag in (lists.ANY, m.tag))

    monkeypatch.setattr(lists, "envelope_matches", across)
    res = bounded_search(build({"comms": 2}, ()), depth=1 << 30, max_states=50_000,
                         variants=())
    assert res.violation is not None
    assert res.violation.invariant in ("mpi_order", "no_lost_message")


def test_the_rule_apart_agrees_with_the_engine_s_on_every_small_envelope():
    from verbspec.spec.tagmatch.invariants import _mpi_matches

    values = (0, 1, lists.ANY)
    for comm in (0, 1):
        for src in values:
            for tag in values:
                r = lists.Recv(0, comm, src, tag, 1)
                for mcomm in (0, 1):
                    for msrc in (0, 1):
                        for mtag in (0, 1):
                            m = lists.Msg(1, mcomm, msrc, mtag, 1)
                            assert _mpi_matches(r, m) == lists.envelope_matches(r, m)
