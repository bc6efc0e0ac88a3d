"""Business failures and workflow defects: which exceptions compensate, which park.

An exception that escapes workflow code is one of two things:

- a **business failure**, raised on purpose: a :class:`~ledgerflow.errors.BusinessFailure`
  (subclassed per outcome), an exception type the workflow lists in
  ``Registry.workflow(business_failures=...)``, or what the engine raises into workflow code
  from the journal's own facts (:class:`~ledgerflow.errors.StepError`: a participant proved an
  effect not applied, a wait timed out, a local step used up its own retry policy). It ends the
  instance as the state machine says: compensated after confirmed effects, FAILED when none is
  confirmed, FORWARD_RECOVERY_REQUIRED after a pivot.
- a **defect** (a ``NameError``, a ``KeyError``, a result that cannot be encoded): a bug in
  the code, fixed by a deploy, never by compensation. It is tried again a bounded number of
  times (a transient bug: the definition's ``defect_retry`` policy, with its backoff), each try
  a durable suspension; then the instance is parked ``workflow_defect`` with the traceback and
  the code fingerprint, and nothing is compensated.

``on_defect="compensate"`` on a workflow keeps the behaviour from before this distinction:
every exception is treated as a business failure.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from ledgerflow.errors import BusinessFailure, StepError

# The park reason of an instance whose workflow code raised a defect past its retries.
WORKFLOW_DEFECT = "workflow_defect"
# The reason (and timeline detail) of a suspension that tries a defect again.
DEFECT_RETRY = "workflow_defect_retry"
# The timeline detail of the wake-up that follows any suspension (see the executor).
WOKEN = "woken"


class OnDefect(enum.Enum):
    """What an exception that is not a declared business failure does to an instance."""

    PARK = "park"  # try again a bounded number of times, then park; nothing compensated
    COMPENSATE = "compensate"  # as a business failure (the behaviour before defects existed)


def is_business_failure(exc: BaseException, declared: tuple[type[BaseException], ...]) -> bool:
    """Whether ``exc`` is a failure the workflow meant (or the journal proved), not a defect."""
    return isinstance(exc, (BusinessFailure, StepError, *declared))


def defect_streak(entries: Iterable[tuple[str, str | None]]) -> int:
    """How many defect retries in a row the instance's timeline ends with.

    ``entries`` are the timeline's (subject, detail), oldest first. Claims, releases and the
    wake-ups after a suspension are passed over; anything else (a step or effect written, an
    operator's resume) means the code moved on, and ends the streak.
    """
    streak = 0
    for subject, detail in reversed(list(entries)):
        if subject == "owner" or (subject == "instance" and detail == WOKEN):
            continue
        if subject == "instance" and detail == DEFECT_RETRY:
            streak += 1
            continue
        break
    return streak


def declared_names(declared: Iterable[type[BaseException]]) -> list[str]:
    """The declared business failures as ``verify`` and the fingerprint name them."""
    return sorted(f"{kind.__module__}.{kind.__qualname__}" for kind in declared)
