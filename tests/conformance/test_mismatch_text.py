"""A mismatch's one line stays readable when the lists it compares are long (a big-gate window
of 256 work requests), and its trace keeps both lists whole."""

from __future__ import annotations

from verbspec.refimpl.conformance.lockstep import LONG_LIST, Mismatch


def wrs(n: int, start: int = 0) -> tuple:
    return tuple((start + i, "staging", 16384 * i, 16384, True) for i in range(n))


def test_long_lists_are_summarised_by_lengths_and_first_difference():
    m = Mismatch(7, "call_big", {"rank": 0}, "receives posted", wrs(256), wrs(64))
    line = str(m)
    assert len(line) < 300
    assert "the spec has 256 items, the implementation 64" in line
    assert "the first to differ is item 65" in line
    assert repr(wrs(256)[64]) in line and "the implementation's nothing" in line
    # the trace's message has every work request of both sides
    assert all(repr(w) in m.full() for w in wrs(256))


def test_a_long_list_differing_inside_names_that_item():
    spec, impl = list(wrs(20)), list(wrs(20))
    impl[12] = (99, "staging", 0, 1, False)
    line = str(Mismatch(3, "call_big", {"rank": 1}, "sends posted", tuple(spec), tuple(impl)))
    assert "the spec has 20 items, the implementation 20" in line
    assert f"item 13: the spec's {spec[12]!r}, the implementation's {impl[12]!r}" in line


def test_short_lists_and_other_values_are_shown_whole():
    short = wrs(LONG_LIST)
    m = Mismatch(2, "gate_done", {"rank": 0}, "receives posted", short, short[:-1])
    assert str(m) == m.full() and repr(short) in str(m)
    assert str(Mismatch(1, "reap", {}, "result", "ok", "bad")) == (
        "step 1 reap(): result: the spec has 'ok', the implementation 'bad'")
