"""The tag-matching protocol's named variants: each a documented switch that reproduces a
known weakness, with what it changes and which invariant it breaks."""

from __future__ import annotations

from verbspec.spec.params import Variant

OFFLOAD_NO_SYNC = Variant(
    "offload-no-sync",
    "hardware keeps matching after it reports an unexpected message, without waiting "
    "for an op carrying software's unexpected count",
    "mpi_order: m1 is reported unexpected, b1 is handed to hardware, m2 matches b1 in "
    "hardware, and m1 (earlier, also matching b1) is left unexpected")

WILDCARD_LAST = Variant(
    "wildcard-last",
    "an arriving message is checked against fully specified receives before wildcard ones",
    "mpi_order: a message takes a later specific receive while an earlier matching "
    "wildcard receive is still posted")

UNEXPECTED_NEWEST_FIRST = Variant(
    "unexpected-newest-first",
    "a newly posted receive searches the unexpected list from its newest end",
    "mpi_order: a receive takes a later message while an earlier matching one waits")

NO_SHADOW_CLAIM = Variant(
    "no-shadow-claim",
    "software matches a message hardware reported unexpected against the receives it "
    "keeps itself only, not against its shadow of the hardware list",
    "offload_refines_software: a message reported unexpected while its receive was "
    "being handed to hardware waits forever beside that receive (no_lost_message)")

OFFLOAD_BEHIND_SOFTWARE = Variant(
    "offload-behind-software",
    "a receive is handed to hardware even when an earlier receive is kept in software",
    "shadow_consistent: hardware no longer holds a head of the posted list, so a "
    "hardware match can overtake an earlier software receive (mpi_order)")

FIN_BEFORE_READ = Variant(
    "fin-before-read",
    "the receiver sends FIN when it starts the RDMA READ instead of when it completes",
    "rndv_buffer_safety: the sender reuses its buffer while the READ still reads it")

EAGER_COMPLETE_ON_POST = Variant(
    "eager-complete-on-post",
    "the eager send completes when posted, before the payload left the sender",
    "eager_buffer_safety: the buffer is reusable while its payload is still on the wire")

SILENT_TRUNCATION = Variant(
    "silent-truncation",
    "a message longer than its receive buffer completes the receive without an error",
    "truncation_reported: a truncated receive reports success")

VARIANTS: tuple[Variant, ...] = (
    OFFLOAD_NO_SYNC,
    WILDCARD_LAST,
    UNEXPECTED_NEWEST_FIRST,
    NO_SHADOW_CLAIM,
    OFFLOAD_BEHIND_SOFTWARE,
    FIN_BEFORE_READ,
    EAGER_COMPLETE_ON_POST,
    SILENT_TRUNCATION,
)
