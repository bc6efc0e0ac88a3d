"""Flow control on effects: the limits and the pure decision of one admission (internal).

A limit is set per participant and operation (its scope, ``effect:PARTICIPANT.OPERATION``)
and counted per flow key: the instance's tenant (``per="tenant"``), a value of the effect's
input (``per="input.customer.id"``, a dotted path) or one key for all (``per=None``). It
bounds the key's effects in flight (dispatched, outcome not yet recorded) and the rate at
which they are dispatched, a GCRA with a burst.

The order in which limits apply, for one effect asking to be dispatched:

1. **Concurrency.** Below ``concurrency_max`` dispatched and unsettled, or the effect waits
   (THROTTLED, reason ``concurrency``) and asks again; it takes no rate permit meanwhile.
2. **Rate.** The GCRA admits it when the key's theoretical arrival time allows
   (``burst`` at once, then one each ``1 / rate_per_second`` seconds). Otherwise the effect
   reserves the next free slot in first-come order (THROTTLED, reason ``rate``) and asks again
   at that slot; the GCRA is checked again then, so admissions never exceed the rate even when
   a waiter wakes late.
3. **Dispatch.** Admitted, its timeout's clock starts: waiting while THROTTLED never counts
   toward the effect's timeout nor toward the deadline after which its outcome is UNKNOWN.

In any window of ``w`` seconds at most ``burst + rate_per_second * w`` effects of one key are
admitted (:func:`admissions_over_rate`), whichever worker admits them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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

    def __post_init__(self) -> None:
        if not self.scope.startswith(SCOPE_PREFIX):
            raise ValueError(f"an effect limit's scope starts with {SCOPE_PREFIX!r}: {self.scope}")
        if self.concurrency_max is not None and self.concurrency_max < 0:
            raise ValueError(f"concurrency_max must be >= 0, got {self.concurrency_max}")
        if self.rate_per_second is not None and not self.rate_per_second > 0:
            raise ValueError(f"rate_per_second must be > 0, got {self.rate_per_second}")
        if self.burst < 1:
            raise ValueError(f"burst must be >= 1, got {self.burst}")
        if self.per not in (None, "tenant") and not (
            self.per.startswith(INPUT_PREFIX) and len(self.per) > len(INPUT_PREFIX)
        ):
            raise ValueError(f"per is 'tenant', 'input.<path>' or None, got {self.per!r}")
        if self.concurrency_max is None and self.rate_per_second is None:
            raise ValueError("an effect limit bounds concurrency, rate or both")


def flow_key(per: str | None, *, tenant: str, payload: Any) -> str:
    """The key an effect is counted under: its tenant, a value of its input, or the one key."""
    if per is None:
        return ALL_KEYS
    if per == "tenant":
        return tenant
    value = payload
    for part in per[len(INPUT_PREFIX) :].split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return "null" if value is None else str(value)[:200]


@dataclass(frozen=True, slots=True)
class KeyState:
    """A flow key's GCRA: ``tat`` the theoretical arrival time of admissions, ``queue_tat``
    the next slot a throttled effect may reserve."""

    tat: float = 0.0
    queue_tat: float = 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    state: AdmissionState
    key_state: KeyState
    # Why it waits ('concurrency' or 'rate'), when to ask again, and the rate slot it holds.
    reason: str | None = None
    retry_at: float | None = None
    slot: float | None = None


def decide(
    limit: FlowLimit,
    key: KeyState,
    *,
    in_flight: int,
    slot: float | None,
    now: float,
    poll_seconds: float,
) -> Decision:
    """Admit one effect now or say how long it waits, in the documented order (concurrency,
    then rate); ``slot`` is the rate slot it reserved when it last asked (None: none yet)."""
    if limit.concurrency_max is not None and in_flight >= limit.concurrency_max:
        return Decision(
            AdmissionState.THROTTLED,
            key,
            reason="concurrency",
            retry_at=now + poll_seconds,
            slot=slot,
        )
    if limit.rate_per_second is None:
        return Decision(AdmissionState.ADMITTED, key)
    interval = 1.0 / limit.rate_per_second
    tolerance = (limit.burst - 1) * interval
    earliest = max(key.tat, now) - tolerance  # when the GCRA admits the next one
    queued = key.queue_tat > now  # throttled effects hold slots still ahead
    if slot is None and (queued or earliest > now):
        reserved = max(key.queue_tat, earliest)
        return Decision(
            AdmissionState.THROTTLED,
            KeyState(tat=key.tat, queue_tat=reserved + interval),
            reason="rate",
            retry_at=reserved,
            slot=reserved,
        )
    if earliest > now or (slot is not None and slot > now):
        # Its slot is not due yet, or it woke early or the key's admissions ran ahead.
        wake = max(earliest, slot if slot is not None else earliest)
        return Decision(AdmissionState.THROTTLED, key, reason="rate", retry_at=wake, slot=slot)
    return Decision(
        AdmissionState.ADMITTED,
        KeyState(tat=max(key.tat, now) + interval, queue_tat=key.queue_tat),
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
