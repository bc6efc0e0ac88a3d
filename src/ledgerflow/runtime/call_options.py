"""The options every face takes for a start, a signal, a callback's completion and a listing,
declared once as typed dictionaries (internal: :class:`~ledgerflow.Engine` and the faces take
them as keyword arguments)."""

from __future__ import annotations

import datetime
from typing import Any, Literal, Required, TypedDict

from ledgerflow.model.instance import InstanceStatus


class StartOptions(TypedDict, total=False):
    """How a start is asked for, as every face takes it (declared here once): the business
    key, the input, a version of the workflow other than the newest, the tenant; when it
    starts (``start_at``: epoch seconds or an aware datetime, or ``start_in`` seconds: it is
    SCHEDULED until then, or ``debounce_seconds`` with ``debounce_max_seconds``: due once no
    other start of the key came for that long, see :mod:`ledgerflow.model.debounce`), and what
    it does when its key has started an instance already (``if_running``, ``if_ended``: see
    :mod:`ledgerflow.model.start_policy`)."""

    key: Required[str]
    input: Any
    version: int | None
    tenant: str | None
    start_at: float | datetime.datetime | None
    start_in: float | None
    if_running: Literal["return", "fail"]
    if_ended: Literal["return", "new_run", "new_run_if_failed", "fail"]
    debounce_seconds: float | None
    debounce_max_seconds: float | None


class SignalOptions(TypedDict, total=False):
    """How an event is sent, as every face takes it (declared here once): its id (the inbox
    keeps it once per id), its payload, who sent it, and the step and run it is meant for
    (an event for a closed step or an older run is kept as refused)."""

    event_id: Required[str]
    payload: Any
    sender: str | None
    for_step: int | None
    run: int | None


class CompletionOptions(TypedDict, total=False):
    """How a participant's callback completes an asynchronous effect, as every face takes it:
    whether it was applied, its evidence or the reason it was not, and the event's id (by
    default derived from the effect's idempotency key, so a repeated callback is a no-op)."""

    applied: Required[bool]
    evidence: Any
    reason: str | None
    event_id: str | None
    # A reply that names the attempt and the effect it answers (a broker reply): one for an
    # attempt the effect has moved past, or for another effect than the key's, is refused.
    attempt: int | None
    effect_id: str | None
    # The owner generation the reply echoes (the dispatch it answers): recorded with the
    # attempt, so the journal shows which owner's request the participant answered.
    generation: int | None
    # False: the attempt is recorded, not fenced (a NATS stream keeps one message per key, so
    # its participant can only answer the first attempt stored).
    attempt_fenced: bool
    # The broker dead-lettered the request (its delivery count...): the outcome goes to a
    # person, never read as applied or not.
    dead_letter: dict[str, Any] | None


class ListOptions(TypedDict, total=False):
    """Which instances a listing shows, newest first: at most ``limit`` (100 by default),
    filtered by status, workflow name and tenant."""

    status: InstanceStatus | None
    workflow: str | None
    tenant: str | None
    limit: int
