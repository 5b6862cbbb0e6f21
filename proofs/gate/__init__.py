"""Induction proofs of the gate protocol: a z3 model of :mod:`verbspec.spec.gate` and its prover.

The scope: two ranks over UC running a workload of ``ops`` ops each, every op a decode gate or
(big_gates=1) a big gate of any size: setup, arming (post the window, cross the 0xD1 barrier),
decode gates (gate_send, transmit, deliver, reap, gate_done reposting seq + window, consume),
the drain before a big gate (header exchange, window*chunks dummies each way), and big-gate
windows (staging receives in chains, a barrier byte whose 8-bit tag wraps, sub-batches of
sends, window done); with faults=1 also crashes, injected error completions, warm-up
leftovers, spurious timeouts, refused bad calls and a rank giving up on a dead peer. Wire loss
and RC are outside. All nine invariants of the gate system are proved, no_deadlock as a
consequence of the inductive invariant.

The model is a counter abstraction: per rank it keeps the protocol's own variables at their
real widths and, for the fabric, counts instead of queues, plus stream positions (see
vocabulary.Rank). It is written separately from the spec; tests/proofs/test_gate_z3.py replays
random runs of the executable spec through abstraction.alpha and checks every step against
moves.move, every invariant verdict against the model's property of the same name, and every
strengthening invariant on every state the runs reach.

Modules, each importing only those above it:

- vocabulary: phases, the state's variables and widths, parameters, action and variant names
- terms: fresh variables, arithmetic helpers, derived stream positions, a move's effect
- moves: one move function per spec action (MOVES), the transition relation
- properties: the nine invariants (PROPERTIES, CONSEQUENCES)
- lemmas: the strengthening invariants (LEMMAS)
- parameters: the model's parameters for a spec configuration, their domain
- abstraction: alpha (spec state -> model values), spec runs checked against the model
- widening: post-states with stepped 32-bit counters widened
- induction: the prover (obligations, Houdini, ``prove``, ``out_of_scope``)
- bmc: bounded model checking of the model, runs replayed on the spec
- envelope: proofs over the parameter envelope, violations just outside it
- bound: a lower bound on dropping runs under depth-mismatch
"""
