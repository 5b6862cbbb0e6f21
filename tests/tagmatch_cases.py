"""Random tag-matching scenarios, shared by the unit tests and the real-MPI oracle.

``oracle_case`` draws only from the classes where MPI fixes the outcome: one sender, or no
receive that can match messages of two senders. Within them the receiver's observed order of
arrivals across senders does not change the outcome, so any interleaving stands for MPI's.
"""

from __future__ import annotations

import random
from typing import Any

EAGER_LIMIT = 8192


def _envelope_ok(recv: dict[str, Any], msgs: list[dict[str, Any]]) -> bool:
    senders = {m["src"] for m in msgs
               if m["comm"] == recv["comm"]
               and recv["src"] in ("any", m["src"]) and recv["tag"] in ("any", m["tag"])}
    return len(senders) <= 1


def oracle_case(rng: random.Random, *, senders: tuple[int, ...] = (1, 2), comms: int = 2,
                tags: int = 3, small: tuple[int, int] = (4, 64),
                large: tuple[int, int] = (65536, 200000)) -> dict[str, Any]:
    """One case: per-sender message lists, the receives, and whether receives are posted
    before any message arrives ("preposted") or after all did ("unexpected")."""
    nsend = rng.choice((1, 2)) if len(senders) > 1 else 1
    active = rng.sample(senders, nsend)
    msgs: list[dict[str, Any]] = []
    per_sender: dict[int, list[dict[str, Any]]] = {}
    for s in active:
        lst = []
        for k in range(rng.randint(1, 5)):
            nbytes = rng.randint(*small) if rng.random() < 0.75 else rng.randint(*large)
            m = {"id": f"s{s}m{k}", "comm": rng.randrange(comms), "src": s,
                 "tag": rng.randrange(tags), "bytes": nbytes}
            lst.append(m)
            msgs.append(m)
        per_sender[s] = lst
    recvs = []
    for k in range(rng.randint(1, 6)):
        r = {"id": f"r{k}", "comm": rng.randrange(comms),
             "src": "any" if rng.random() < 0.4 else rng.choice(active),
             "tag": "any" if rng.random() < 0.3 else rng.randrange(tags)}
        if not _envelope_ok(r, msgs):
            r["src"] = rng.choice(active)    # pin the source: one sender's messages only
        big = rng.random() < 0.3
        r["bytes"] = rng.randint(*large) if big else rng.randint(*small)
        recvs.append(r)
    return {"mode": rng.choice(("preposted", "unexpected")), "senders": per_sender,
            "recvs": recvs}


def case_events(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The scenario events the receiver observes for an oracle case."""
    posts = [{"op": "post_recv", **r} for r in case["recvs"]]
    arrivals = [{"op": "arrive", **m} for s in sorted(case["senders"])
                for m in case["senders"][s]]
    return posts + arrivals if case["mode"] == "preposted" else arrivals + posts


def random_events(rng: random.Random, n: int, *, senders: int = 3, comms: int = 2,
                  tags: int = 3, cancel: float = 0.1) -> list[dict[str, Any]]:
    """Any scenario (no restriction on classes), interleaving posts, arrivals and cancels."""
    events: list[dict[str, Any]] = []
    posted: list[str] = []
    for i in range(n):
        x = rng.random()
        if x < cancel and posted:
            rid = posted.pop(rng.randrange(len(posted)))
            events.append({"op": "cancel", "id": rid})
        elif x < 0.55:
            rid = f"r{i}"
            posted.append(rid)
            events.append({"op": "post_recv", "id": rid, "comm": rng.randrange(comms),
                           "src": "any" if rng.random() < 0.3 else rng.randrange(senders),
                           "tag": "any" if rng.random() < 0.3 else rng.randrange(tags),
                           "bytes": rng.randint(0, 16)})
        else:
            events.append({"op": "arrive", "id": f"m{i}", "comm": rng.randrange(comms),
                           "src": rng.randrange(senders), "tag": rng.randrange(tags),
                           "bytes": rng.randint(0, 16)})
    return events
