"""What a tag-matching implementation shows the conformance harness: a full implementation
shows every emitted field and its view; a partial one (a third-party matcher such as UCX's)
declares the fields it reports and the configurations it can express, each limit with why."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from verbspec.refimpl.engines.tagmatch_engine import Emitted
from verbspec.spec.tagmatch.state import Params

EMITTED_FIELDS = tuple(f.name for f in fields(Emitted))


@dataclass(frozen=True)
class Limit:
    """A parameter's largest value an implementation can express, and why."""

    param: str
    most: int
    why: str


@dataclass(frozen=True)
class Observes:
    """What an implementation shows the harness: the ``Emitted`` fields it reports (compared
    in ``EMITTED_FIELDS`` order), whether its ``view()`` is compared, the parameter limits of
    the configurations it can express, and what it does not show, each with why (for
    reports). The default is a full implementation."""

    emitted: tuple[str, ...] = EMITTED_FIELDS
    view: bool = True
    limits: tuple[Limit, ...] = ()
    unobserved: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.emitted) - set(EMITTED_FIELDS))
        if unknown:
            raise ValueError(f"observes unknown emitted fields {unknown}: expected some of "
                             f"{', '.join(EMITTED_FIELDS)}")
        names = {f.name for f in fields(Params)}
        for lim in self.limits:
            if lim.param not in names:
                raise ValueError(f"a limit on unknown parameter {lim.param!r}")

    def declines(self, params: Params) -> str | None:
        """Why the implementation cannot run a configuration, or None."""
        values = asdict(params)     # the parameters by name, and nothing else of the spec's
        for lim in self.limits:
            value = values[lim.param]
            if value > lim.most:
                return f"{lim.param}={value} (at most {lim.most}): {lim.why}"
        return None
