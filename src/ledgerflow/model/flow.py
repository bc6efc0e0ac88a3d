"""Flow control on effects: the limits and the pure decision of one admission (internal).

A limit is set per participant and operation (its scope, ``effect:PARTICIPANT.OPERATION``)
and counted per flow key: the instance's tenant (``per="tenant"``), a value of the effect's
input (``per="input.customer.id"``, a dotted path) or one key for all (``per=None``). It
bounds the key's effects in flight (dispatched, outcome not yet recorded) and the rate at
which they are dispatched, a GCRA with a burst.

The order in which limits apply, for one effect asking to be dispatched:

1. **Concurrency.** Below ``concurrency_max`` dispatched and unsettled, or the effect waits
   (THROTTLED, reason ``concurrency``) and asks again; it takes no rate permit meanwhile.
2. **Order.** The key's waiters are admitted in order: priority, then weighted fairness
   between keys, then arrival (:mod:`ledgerflow.model.flow_order`). Without a rate, a waiter
   with another before it waits (THROTTLED, reason ``order``) and asks again shortly.
3. **Rate.** The GCRA admits it when the key's theoretical arrival time allows
   (``burst`` at once, then one each ``1 / rate_per_second`` seconds). Otherwise it reserves a
   slot, one interval after the last, in that order: a newcomer that comes before waiters
   holding slots takes the first of theirs and moves theirs one interval later (reason
   ``order``; a waiter reads its slot again when it asks). At its slot the GCRA is checked
   again (so admissions never exceed the rate even when a waiter wakes late); waiters due at
   once ask one interval apart in order, and none is admitted while a due waiter of higher
   priority waits (see flow_order for what a late waker changes).
4. **Dispatch.** Admitted, its timeout's clock starts: waiting while THROTTLED never counts
   toward the effect's timeout nor toward the deadline after which its outcome is UNKNOWN.

In any window of ``w`` seconds at most ``burst + rate_per_second * w`` effects of one key are
admitted (:func:`admissions_over_rate`), whichever worker admits them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ledgerflow.errors import RegistrationError
from ledgerflow.model.flow_order import (
    ONE_FAIRNESS_KEY,
    PRIORITY_DEFAULT,
    Standing,
    checked_priority,
    checked_weights,
)

SCOPE_PREFIX = "effect:"
# The one flow key of a limit that is not keyed (per=None).
ALL_KEYS = "*"
INPUT_PREFIX = "input."


def effect_scope(participant: str, operation: str) -> str:
    return f"{SCOPE_PREFIX}{participant}.{operation}"


class AdmissionState(enum.StrEnum):
    THROTTLED = "THROTTLED"  # waiting for its limits, never sent: its timeout has not started
    ADMITTED = "ADMITTED"  # dispatched, outcome not yet recorded
    SETTLED = "SETTLED"  # admitted, and its outcome recorded since


@dataclass(frozen=True, slots=True)
class FlowLimit:
    """The limit on one participant's operation (None: that dimension is unlimited)."""

    scope: str
    concurrency_max: int | None = None
    rate_per_second: float | None = None
    burst: int = 1
    # 'tenant', 'input.<dotted path>' or None (one key for every effect).
    per: str | None = None
    # Weighted fairness between the waiters of one flow key: by 'tenant' or 'input.<path>'
    # (None: first come, first served), each fairness key's weight 1 unless listed.
    fair_by: str | None = None
    weights: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.scope.startswith(SCOPE_PREFIX):
            raise ValueError(f"an effect limit's scope starts with {SCOPE_PREFIX!r}: {self.scope}")
        if self.concurrency_max is not None and self.concurrency_max < 0:
            raise ValueError(f"concurrency_max must be >= 0, got {self.concurrency_max}")
        if self.rate_per_second is not None and not self.rate_per_second > 0:
            raise ValueError(f"rate_per_second must be > 0, got {self.rate_per_second}")
        if self.burst < 1:
            raise ValueError(f"burst must be >= 1, got {self.burst}")
        for name, value in (("per", self.per), ("fair_by", self.fair_by)):
            if value not in (None, "tenant") and not (
                value.startswith(INPUT_PREFIX) and len(value) > len(INPUT_PREFIX)
            ):
                raise ValueError(f"{name} is 'tenant', 'input.<path>' or None, got {value!r}")
        if self.fair_by is not None and self.fair_by == self.per:
            raise ValueError(f"fair_by={self.fair_by!r} is per: each key would be alone")
        if self.weights and self.fair_by is None:
            raise ValueError("weights are given per fairness key: declare fair_by too")
        object.__setattr__(self, "weights", checked_weights(self.weights, what=self.scope))
        if self.concurrency_max is None and self.rate_per_second is None:
            raise ValueError("an effect limit bounds concurrency, rate or both")

    def weight(self, fairness_key: str) -> float:
        return self.weights.get(fairness_key, 1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectLimit:
    """A limit declared in code (``@participant.effect(limit=...)`` or
    ``registry.limit_effect``): the bounds of :class:`FlowLimit`, its scope given by where it is
    declared. Applied to the store when an engine opens, if new or changed since last applied
    (see docs/programming-model.md, "Flow control on effects")."""

    concurrency_max: int | None = None
    rate_per_second: float | None = None
    burst: int = 1
    per: str | None = None
    fair_by: str | None = None
    weights: Mapping[str, float] | None = None

    def at(self, scope: str) -> FlowLimit:
        """The limit as the store keeps it, for the operation ``scope`` names."""
        return FlowLimit(
            scope=scope,
            concurrency_max=self.concurrency_max,
            rate_per_second=self.rate_per_second,
            burst=self.burst,
            per=self.per,
            fair_by=self.fair_by,
            weights=dict(self.weights or {}),
        )


def flow_key(per: str | None, *, tenant: str, payload: Any, one: str = ALL_KEYS) -> str:
    """The key an effect is counted under (or, given ``fair_by``, shares fairly by): its
    tenant, a value of its input, or the one key."""
    if per is None:
        return one
    if per == "tenant":
        return tenant
    value = payload
    for part in per[len(INPUT_PREFIX) :].split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "null" if value is None else str(value)[:200]


@dataclass(frozen=True, slots=True)
class KeyState:
    """A flow key's GCRA: ``tat`` the theoretical arrival time of admissions, ``queue_tat``
    the end of the slots reserved by throttled effects; and ``vtime`` its virtual time, the
    fairness tag of its latest admission (see flow_order)."""

    tat: float = 0.0
    queue_tat: float = 0.0
    vtime: float = 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    state: AdmissionState
    key_state: KeyState
    # Why it waits ('concurrency', 'rate' or 'order': others come first), when to ask again,
    # the rate slot it holds, and (taking a slot of others) from which slot theirs move on.
    reason: str | None = None
    retry_at: float | None = None
    slot: float | None = None
    shift_from: float | None = None


def decide(
    limit: FlowLimit,
    key: KeyState,
    *,
    in_flight: int,
    slot: float | None,
    standing: Standing,
    tag: float,
    now: float,
    poll_seconds: float,
) -> Decision:
    """Admit one effect now or say how long it waits, in the documented order (concurrency,
    order, then rate); ``slot`` is the rate slot it holds (None: none yet), ``standing``
    where it stands among the key's waiters, ``tag`` its fairness tag (the key's virtual time
    moves to it when it is admitted)."""
    if limit.concurrency_max is not None and in_flight >= limit.concurrency_max:
        return Decision(
            AdmissionState.THROTTLED, key, reason="concurrency", retry_at=now + poll_seconds,
            slot=slot,
        )  # fmt: skip
    admitted = AdmissionState.ADMITTED
    if limit.rate_per_second is None:
        if standing.ahead:
            return Decision(
                AdmissionState.THROTTLED, key, reason="order", retry_at=now + poll_seconds
            )
        return Decision(admitted, replace(key, vtime=standing.vtime_after(key.vtime, tag)))
    interval = 1.0 / limit.rate_per_second
    tolerance = (limit.burst - 1) * interval
    earliest = max(key.tat, now) - tolerance  # when the GCRA admits the next one
    if slot is None and standing.behind_slot is not None:
        # It comes before waiters that hold slots: it takes the first of theirs, and they
        # (and the reservations' end) move one interval later.
        taken = standing.behind_slot
        return Decision(
            AdmissionState.THROTTLED, replace(key, queue_tat=key.queue_tat + interval),
            reason="order", retry_at=max(taken, earliest), slot=taken, shift_from=taken,
        )  # fmt: skip
    queued = key.queue_tat > now or standing.due_ahead > 0
    if slot is None and (queued or earliest > now):
        reserved = max(key.queue_tat, earliest)
        return Decision(
            AdmissionState.THROTTLED, replace(key, queue_tat=reserved + interval),
            reason="rate", retry_at=reserved, slot=reserved,
        )  # fmt: skip
    # The waiters before it whose slots are due too ask one interval apart, in order.
    turn = max(earliest, now) + standing.due_ahead * interval
    if slot is not None and slot > now:
        return Decision(AdmissionState.THROTTLED, key, reason="rate", retry_at=slot, slot=slot)
    if earliest > now:
        return Decision(AdmissionState.THROTTLED, key, reason="rate", retry_at=turn, slot=slot)
    if standing.due_ahead:
        return Decision(AdmissionState.THROTTLED, key, reason="order", retry_at=turn, slot=slot)
    return Decision(
        admitted,
        replace(key, tat=max(key.tat, now) + interval, vtime=standing.vtime_after(key.vtime, tag)),
    )


# How finely admissions are stamped: SQLite's clock reads to the millisecond (PostgreSQL's to
# the microsecond), and a GCRA that runs at its rate for long sits exactly on its bound, so a
# window is allowed this much more time before it counts as over the rate.
CLOCK_RESOLUTION_SECONDS = 1e-3


def admissions_over_rate(
    admitted_at: Sequence[float],
    *,
    rate_per_second: float,
    burst: int,
    jitter: float = 0.0,
    resolution: float = CLOCK_RESOLUTION_SECONDS,
) -> tuple[int, float, float] | None:
    """The first window in which one key's admissions exceed ``burst + rate * (width +
    jitter + resolution)``: (count, start, end); None when the rate held. ``jitter`` is how
    much later than its admission a call may be seen (0 for the admissions themselves; a
    participant's log of arrivals sees the dispatch's own delays). Need not be sorted."""
    times = sorted(admitted_at)
    for first in range(len(times)):
        # The densest windows starting at ``first`` end at a later admission.
        for last in range(first + burst, len(times)):
            width = times[last] - times[first]
            if last - first + 1 > burst + rate_per_second * (width + jitter + resolution):
                return last - first + 1, times[first], times[last]
            if rate_per_second * width > len(times):
                break
    return None


@dataclass(frozen=True, slots=True)
class FlowAsk:
    """One attempt of an effect asking to be dispatched, fenced on its owner's generation."""

    instance_id: str
    owner: str
    generation: int
    effect_id: str
    attempt: int
    scope: str
    flow_key: str
    priority: int = PRIORITY_DEFAULT
    fairness_key: str = ONE_FAIRNESS_KEY


@dataclass(frozen=True, slots=True)
class Admission:
    """An attempt's admission as the store keeps it (``now``: the clock it was decided by)."""

    effect_id: str
    attempt: int
    instance_id: str
    scope: str
    flow_key: str
    state: AdmissionState
    reason: str | None
    retry_at: float | None
    admitted_at: float | None
    throttled_since: float | None
    throttled_seconds: float
    concurrency_max: int | None
    rate_per_second: float | None
    burst: int | None
    now: float | None = None
    priority: int = PRIORITY_DEFAULT
    fairness_key: str = ONE_FAIRNESS_KEY
    tag: float | None = None
    weight: float = 1.0
    # Waiters before it in order passed over at its admission, their workers silent too long.
    passed_over: int = 0


def declared_limit(limit: object, *, scope: str) -> FlowLimit | None:
    """A limit declared in code, checked where it is declared (RegistrationError)."""
    if limit is None:
        return None
    if not isinstance(limit, EffectLimit):
        raise RegistrationError(
            f"{scope}: limit= takes an lf.EffectLimit(rate_per_second=..., ...), "
            f"not {type(limit).__name__}"
        )
    try:
        return limit.at(scope)
    except (TypeError, ValueError) as exc:
        raise RegistrationError(f"effect limit {scope}: {exc}") from None


def declared_priority(priority: object, *, what: str) -> int:
    try:
        return checked_priority(priority, what=what)
    except ValueError as exc:
        raise RegistrationError(str(exc)) from None


class LimitDeclarations:
    """The effect-limits part of :class:`~ledgerflow.model.definition.Registry`: limits
    declared with ``registry.limit_effect`` or on an effect (``limit=``), applied to the store
    when an engine opens."""

    participants: Mapping[str, Any]
    limits_declared: dict[str, FlowLimit]

    def limit_effect(self, participant: str, operation: str, **bounds: Any) -> FlowLimit:
        """Declare the limit of one participant's operation in code (the bounds of
        ``Engine.limit_effect``): applied when an engine opens, if new or changed since."""
        scope = effect_scope(participant, operation)
        limit = declared_limit(EffectLimit(**bounds), scope=scope)
        assert limit is not None
        self.limits_declared[scope] = limit
        return limit

    def declared_limits(self) -> list[FlowLimit]:
        """Every limit declared in code: on the effects, then by limit_effect (which wins)."""
        found = {
            effect_scope(p.name, op): d.limit
            for p in self.participants.values()
            for op, d in p.effects.items()
            if d.limit is not None
        }
        return list({**found, **self.limits_declared}.values())
