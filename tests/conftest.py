"""Fixtures shared by the suite: a system per protocol at its defaults, and the rule for tiers
that need something this machine may lack (MPICH, a device): they skip, saying why, unless
``VERBSPEC_REQUIRE_<TIER>=1`` is set (as CI sets it), which turns the skip into a failure."""

from __future__ import annotations

import os

import pytest

from verbspec.spec import protocols


def require(tier: str, missing: str | None) -> None:
    """Skip the calling test or fixture with the reason ``missing`` (None: nothing is missing),
    or fail instead where the environment requires the tier to run."""
    if missing is None:
        return
    if os.environ.get(f"VERBSPEC_REQUIRE_{tier.upper()}") == "1":
        pytest.fail(f"the {tier} tier is required here but cannot run: {missing}")
    pytest.skip(missing)


@pytest.fixture(params=sorted(protocols.MODULES))
def protocol_system(request):
    """Each protocol's system at its defaults."""
    return protocols.load(request.param).build({}, ())


@pytest.fixture
def gate_system():
    return protocols.load("gate").build({}, ())


@pytest.fixture
def tagmatch_system():
    return protocols.load("tagmatch").build({}, ())
