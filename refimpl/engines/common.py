"""What the reference engines of both protocols say alike: an engine's refusal of a call."""

from __future__ import annotations


class EngineError(ValueError):
    """A call an engine refuses: bad input, or a call it cannot take where it is (a step it
    has nothing to take, a phase that takes no such input). A harness or driver bug, not a
    verdict on the protocol."""
