"""Profiles: how a program's raw recording (refimpl/traces/raw.py) maps onto a spec, so that
``verbspec trace validate --raw`` can explain it as a run of the spec."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from verbspec.refimpl.traces.profiles import ds4_v14_linux, pyverbs_gate, verbs_gate
from verbspec.refimpl.traces.profiles.common import Profile, ProfileError
from verbspec.refimpl.traces.raw import read_recordings
from verbspec.refimpl.traces.read import RankTrace

PROFILES: dict[str, Profile] = {p.name: p for p in (verbs_gate.PROFILE,
                                                    pyverbs_gate.PROFILE,
                                                    ds4_v14_linux.PROFILE)}


def profile(name: str) -> Profile:
    if name not in PROFILES:
        raise ProfileError(f"no profile {name!r} (known: {', '.join(PROFILES)})")
    return PROFILES[name]


def raw_ranks(paths: list[Path], name: str, params: Mapping[str, Any]
              ) -> tuple[RankTrace, RankTrace]:
    """The two ranks of a raw recording, as the profile ``name`` maps them onto its spec."""
    return profile(name).ranks(read_recordings(paths), params)
