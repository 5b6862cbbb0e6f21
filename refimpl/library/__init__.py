"""The reference transport library: ``GateChannel`` (the gate window protocol, one rank's end)
and ``TaggedEndpoint`` (MPI-style tagged messaging), with the sim pair that runs two rank
processes over the simulated fabric."""

from verbspec.refimpl.library.gate_channel import GateChannel, GateError, Stats, gate_config
from verbspec.refimpl.library.sim_pair import (
    RankOutcome,
    SimPair,
    close_channel,
    open_channel,
    run_pair,
    run_ranks,
)
from verbspec.refimpl.library.tagmatch_endpoint import (
    ANY_SOURCE,
    ANY_TAG,
    TAG_UB,
    Request,
    Status,
    TaggedConfig,
    TaggedEndpoint,
    TaggedError,
    TaggedTimeout,
    open_endpoint,
    run_tagged,
    wait_all,
)

__all__ = ["ANY_SOURCE", "ANY_TAG", "GateChannel", "GateError", "RankOutcome", "Request",
           "SimPair", "Stats", "Status", "TAG_UB", "TaggedConfig", "TaggedEndpoint", "TaggedError",
           "TaggedTimeout", "close_channel", "gate_config", "open_channel", "open_endpoint",
           "run_pair", "run_ranks", "run_tagged", "wait_all"]
