"""The gate protocol, one rank's steps and the fabric's, as pure functions over GateState.

Each ``do_*`` method is one protocol step: it takes a state (and the action's arguments) and
returns the next state with the Observation an implementation would show for that step. Its
``@action`` declaration names its parameters and its guard, an ``en_*`` method yielding the
argument tuples for which the step is enabled; ``GateSpec.actions`` binds them into the
system's action list.

The steps are grouped by phase, a module each: ``setup`` (setup, the application's calls,
arming), ``decode`` (a decode gate, reaping completions), ``big_gate`` (a big gate's header,
the drain, the big-gate windows), ``block`` (the verify block and its batch gates),
``fabric`` and ``faults`` (faults, failing posts and polls), over the shared helpers of
``common``. :class:`GateSpec` mixes them into one class, whose steps call each other's
helpers freely.

Every failure's text comes from a declaration in ``errors.py``: ds4's own format where ds4
prints one, filled from the state as ds4 fills it; otherwise a text marked as the spec's own."""

from __future__ import annotations

from verbspec.spec.actions import action_names
from verbspec.spec.gate.steps.big_gate import BigGateSteps
from verbspec.spec.gate.steps.block import BlockSteps
from verbspec.spec.gate.steps.common import (
    BATCH_GATE,
    BIG_POLL_BATCH,
    POLL_BATCH,
    POST_FAILURE,
    RANKS,
    VECTOR_BUFFERS,
    VERIFY_BLOCK,
    ghost_clean,
    hello_mismatch,
    poll_batch,
)
from verbspec.spec.gate.steps.decode import DecodeSteps
from verbspec.spec.gate.steps.fabric import FabricSteps
from verbspec.spec.gate.steps.faults import FaultSteps
from verbspec.spec.gate.steps.setup import SetupSteps


# declared() lists the actions of the bases last to first: the protocol's order (setup first,
# faults last) is the reverse of the bases'
class GateSpec(FaultSteps, FabricSteps, BlockSteps, BigGateSteps, DecodeSteps, SetupSteps):
    """The gate protocol for one configuration and set of variants."""


# the verify block's steps, with verify_blocks=1
BLOCK_ACTIONS = action_names(GateSpec, group=VERIFY_BLOCK)
# a verify block's batch gates, with the verify window switched off
BATCH_ACTIONS = action_names(GateSpec, group=BATCH_GATE)
# the failing posts and polls, with post_failures=1
POST_FAILURE_ACTIONS = action_names(GateSpec, group=POST_FAILURE)

__all__ = ["BATCH_ACTIONS", "BIG_POLL_BATCH", "BLOCK_ACTIONS", "POLL_BATCH",
           "POST_FAILURE_ACTIONS", "RANKS", "VECTOR_BUFFERS", "GateSpec", "ghost_clean",
           "hello_mismatch", "poll_batch"]
