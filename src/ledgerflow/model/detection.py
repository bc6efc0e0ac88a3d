"""Stuck and poison work: the named bounds and the pure rules that apply them.

Detection answers one question from values already in the ledger: does this instance need a
person? Poison work (the same failure past a bound) is *parked*: the instance goes to
MANUAL_INTERVENTION, so it stops consuming workers. Stuck work (no progress past a bound) is
*flagged*: the instance stays where it is, because it may still move on by itself (a slow
participant answers, a worker comes back), and the flag is cleared when a later scan finds the
condition gone. Nothing here reads a clock or a database: callers pass ``now`` and the values a
scan read (:class:`QuietInstance`, :class:`DueInstance`, :class:`SilentEffect`), so every rule
is a plain function a test can call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import ConfigurationError
from ledgerflow.model.routing import Served

# -- reason codes -------------------------------------------------------------------------------

# Parked by detection (the instance is in MANUAL_INTERVENTION with this reason code).
POISON_CRASH_LOOP = "poison_crash_loop"
POISON_STEP = "poison_step"
# Flags (the instance stays where it is; an open row in lf_attention).
POISON_CORRUPT_ROW = "poison_corrupt_row"
STUCK_STEP = "stuck_step"
STUCK_UNCLAIMED = "stuck_unclaimed"
PARTICIPANT_UNRESPONSIVE = "participant_unresponsive"
# Due work pinned to a definition (workflow, version, fingerprint) that no live worker serves.
NO_CAPABLE_WORKER = "no_capable_worker"
# A waiting instance, not due, that holds what would move it on (a lost wake-up): the scan
# flags it and makes it due.
STUCK_ARRIVAL = "stuck_arrival"
# Due work pinned to code nobody serves whose journal does not replay against the code a live
# worker has of its workflow and version: not adopted, flagged by that worker with where the
# two part (runtime/adoption.py); cleared by the scan once it is served or has ended.
REPLAY_DIVERGENCE = "replay_divergence"
# Due work pinned to code nobody serves whose journal holds an UNKNOWN effect that the replay
# against a live worker's code does not reach asking for that very effect: only the code that
# sent it (or an operator's ``repair resolve-effect``) settles it, so it is not adopted; flagged
# by that worker with the effect and why; cleared by the scan as ``replay_divergence`` is.
ADOPTION_REFUSED = "adoption_refused"

# The flags a scan raises and, when the condition is gone, clears by itself.
SCANNED_FLAGS = (
    STUCK_STEP,
    STUCK_UNCLAIMED,
    PARTICIPANT_UNRESPONSIVE,
    NO_CAPABLE_WORKER,
    STUCK_ARRIVAL,
)
# Who clears a scanned flag whose condition no longer holds.
DETECTOR = "detector"


@dataclass(frozen=True, slots=True, kw_only=True)
class DetectionBounds:
    """How long or how often before work counts as stuck or poison.

    Example::

        DetectionBounds(step_deadline_seconds=60, participant_silent_seconds=30)
    """

    # Leases that ran out in a row with no commit in between: the instance kills its workers.
    crash_loop_lease_expiries: int = 3
    # The same error (type and message) this many attempts in a row parks the instance even
    # when its retry policy would go on: retrying a deterministic failure only burns attempts.
    poison_step_attempts: int = 5
    # An owned instance with no commit for this long, although its lease is being renewed.
    step_deadline_seconds: float = 300.0
    # A runnable, due instance that no worker has taken for this long.
    unclaimed_after_seconds: float = 300.0
    # An effect sent (INTENDED) or accepted (ACCEPTED) and not answered for this long.
    participant_silent_seconds: float = 120.0
    # A worker whose last heartbeat is older than this is not live (it beats a few times per
    # bound, see limits.WORKER_HEARTBEATS_PER_BOUND).
    worker_silent_seconds: float = 30.0
    # Due work that no live worker serves for this long is flagged no_capable_worker.
    unserved_after_seconds: float = 60.0
    # A waiting instance that is not due although it holds, for this long, an event its open
    # wait takes, the callback of an effect it awaits, or a cancel request at a wait or timer.
    arrival_unanswered_seconds: float = 30.0
    # How often every worker scans for stuck work.
    scan_interval_seconds: float = 30.0
    # At most this many findings per reason and scan (a scan is bounded like everything else).
    scan_rows_max: int = 500

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if value <= 0:
                raise ConfigurationError(f"detection bound {item.name} must be positive: {value}")
        if self.crash_loop_lease_expiries < 1 or self.poison_step_attempts < 2:
            raise ConfigurationError(
                "crash_loop_lease_expiries must be at least 1 and poison_step_attempts at least 2"
            )

    @classmethod
    def parse(cls, text: str) -> DetectionBounds:
        """Bounds from ``name=value`` pairs separated by commas (the rest keep their defaults),
        as the ``LEDGERFLOW_DETECTION`` environment variable gives them to a worker."""
        types = {item.name: item.type for item in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for pair in filter(None, (p.strip() for p in text.split(","))):
            name, _, raw = pair.partition("=")
            name = name.strip()
            if name not in types:
                known = ", ".join(sorted(types))
                raise ConfigurationError(f"unknown detection bound {name!r}; known: {known}")
            try:
                values[name] = int(raw) if types[name] in (int, "int") else float(raw)
            except ValueError:
                raise ConfigurationError(
                    f"detection bound {name} is not a number: {raw!r}"
                ) from None
        return cls(**values)


DEFAULT_BOUNDS = DetectionBounds()


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One instance that needs a person, why, and the evidence a person reads first."""

    instance_id: str
    reason_code: str
    evidence: str


# -- poison: crash loop ---------------------------------------------------------------------------


def is_crash_loop(lease_expiries: int, *, lease_expiries_max: int) -> bool:
    """Whether a claim that just counted ``lease_expiries`` must park instead of hand out
    (``lease_expiries_max`` is :attr:`DetectionBounds.crash_loop_lease_expiries`)."""
    return lease_expiries >= lease_expiries_max


def is_last_chance(lease_expiries: int, lease_expiries_max: int) -> bool:
    """One more lapse would park it: its next run must be alone in its worker, so that a
    worker killed by *another* instance cannot push it over the bound."""
    return lease_expiries == lease_expiries_max - 1 and lease_expiries > 0


def crash_loop_reason(lease_expiries: int, last_owners: Sequence[str]) -> str:
    owners = ", ".join(last_owners) if last_owners else "unknown"
    return (
        f"the lease ran out {lease_expiries} times in a row with no commit in between (each "
        f"owner died or stalled while driving it); last owners: {owners}"
    )


# -- poison: the same step failure ----------------------------------------------------------------


def failure_streak(previous: Mapping[str, Any] | None, current: Mapping[str, Any]) -> int:
    """How many attempts in a row ended with ``current``'s error, counting this one.

    ``previous`` is the error journaled with the step's last failed attempt (with its own
    ``repeated`` count), or None when there was none.
    """
    if previous is None:
        return 1
    same = (previous.get("type"), previous.get("message")) == (
        current.get("type"),
        current.get("message"),
    )
    if not same:
        return 1
    earlier = previous.get("repeated", 1)
    return (earlier if isinstance(earlier, int) and earlier > 0 else 1) + 1


def is_poison_step(streak: int, bounds: DetectionBounds) -> bool:
    return streak >= bounds.poison_step_attempts


def poison_step_reason(*, step: str, seq: int, attempt: int, error: Mapping[str, Any]) -> str:
    return (
        f"step {seq} ({step}) failed the same way {error.get('repeated', 1)} attempts in a row "
        f"(last attempt {attempt}): {error.get('type')}: {error.get('message')}; retrying is "
        "stopped until a person fixes the cause"
    )


# -- stuck: what a scan selected, and the rules over it -------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class QuietInstance:
    """An owned instance with no claim or commit since the scan's cutoff, with its latest
    journaled step (all four ``step_*`` are None when none is journaled)."""

    instance_id: str
    status: str
    owner: str | None
    lease_expires_at: float | None
    # Its last claim or commit.
    updated_at: float
    step_seq: int | None = None
    step_name: str | None = None
    step_status: str | None = None
    step_attempt: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DueInstance:
    """A runnable instance due since the scan's cutoff that no live lease holds."""

    instance_id: str
    status: str
    owner: str | None
    lease_expires_at: float | None
    available_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SilentEffect:
    """An effect sent (INTENDED) or accepted (ACCEPTED) and not answered since the cutoff."""

    instance_id: str
    participant: str
    operation: str
    idempotency_key: str
    attempt: int
    state: str
    # When it was sent or accepted.
    updated_at: float


def _age(now: float, since: float) -> str:
    return f"{max(0.0, now - since):.1f}s"


def stuck_step(quiet: QuietInstance, *, now: float, bounds: DetectionBounds) -> Finding | None:
    """An owned instance whose lease is renewed but which commits nothing past the deadline."""
    if quiet.owner is None or quiet.lease_expires_at is None:
        return None
    if quiet.lease_expires_at <= now or now - quiet.updated_at < bounds.step_deadline_seconds:
        return None
    latest = (
        f"latest journaled step {quiet.step_seq} ({quiet.step_name}) is "
        f"{quiet.step_status} at attempt {quiet.step_attempt}"
        if quiet.step_seq is not None
        else "no step journaled yet"
    )
    return Finding(
        instance_id=quiet.instance_id,
        reason_code=STUCK_STEP,
        evidence=(
            f"{quiet.status} and owned by {quiet.owner} (lease renewed), but no commit for "
            f"{_age(now, quiet.updated_at)} (bound {bounds.step_deadline_seconds:g}s); {latest}"
        ),
    )


def stuck_unclaimed(due: DueInstance, *, now: float, bounds: DetectionBounds) -> Finding | None:
    """A runnable instance, due for longer than the bound, that no live lease holds."""
    live = due.owner is not None and (due.lease_expires_at or 0.0) > now
    if live or now - due.available_at < bounds.unclaimed_after_seconds:
        return None
    last = f"; last owner {due.owner}" if due.owner is not None else ""
    return Finding(
        instance_id=due.instance_id,
        reason_code=STUCK_UNCLAIMED,
        evidence=(
            f"{due.status} and due for {_age(now, due.available_at)} (bound "
            f"{bounds.unclaimed_after_seconds:g}s) with no live lease: no worker is running it "
            f"(none started, all busy, or none has its definition){last}"
        ),
    )


def participant_unresponsive(
    effects: Sequence[SilentEffect], *, now: float, bounds: DetectionBounds
) -> Finding | None:
    """Effects of one instance sent or accepted and unanswered past the bound."""
    silent = [e for e in effects if now - e.updated_at >= bounds.participant_silent_seconds]
    if not silent:
        return None
    parts = [
        f"{e.participant}.{e.operation} key {e.idempotency_key} attempt {e.attempt} "
        f"{e.state} since {_age(now, e.updated_at)} ago"
        for e in silent
    ]
    return Finding(
        instance_id=silent[0].instance_id,
        reason_code=PARTICIPANT_UNRESPONSIVE,
        evidence=(f"no answer past {bounds.participant_silent_seconds:g}s: " + "; ".join(parts))[
            :4000
        ],
    )


# -- routing: due work no live worker can run -----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UnservedInstance:
    """A runnable instance, due since the scan's cutoff with no live lease, pinned to a
    definition no live worker announced."""

    instance_id: str
    status: str
    workflow_name: str
    workflow_version: int
    fingerprint: str
    # Its due time, or for one whose owner's lease lapsed, the lapse.
    due_at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class UnservedCount:
    """Instances not ended (running, waiting, compensating or cancelling) pinned to one
    definition that no live worker serves, and how many of them are due now."""

    workflow_name: str
    workflow_version: int
    fingerprint: str
    instances: int
    due: int


def no_capable_worker(
    unserved: UnservedInstance,
    *,
    now: float,
    bounds: DetectionBounds,
    live: Sequence[Served],
) -> Finding | None:
    """Due work that no live worker can run past the bound: flagged, never parked or touched
    (a worker with its definition may yet start). ``live`` is what the live workers serve."""
    if now - unserved.due_at < bounds.unserved_after_seconds:
        return None
    pinned = Served(unserved.workflow_name, unserved.workflow_version, unserved.fingerprint)
    if pinned in live:
        return None
    same = sorted({s for s in live if s.workflow_name == unserved.workflow_name})
    if same:
        others = "live workers serve only " + ", ".join(s.label for s in same)
    elif live:
        others = f"no live worker serves any version of {unserved.workflow_name}"
    else:
        others = "no worker is live"
    return Finding(
        instance_id=unserved.instance_id,
        reason_code=NO_CAPABLE_WORKER,
        evidence=(
            f"{unserved.status} and due for {_age(now, unserved.due_at)} (bound "
            f"{bounds.unserved_after_seconds:g}s), pinned to {pinned.label}, which no live "
            f"worker serves; {others}. Start a worker with that code (or move the instance "
            "to code that is proven to replay it)"
        ),
    )


# -- lost wake-ups: what arrived, held by an instance asleep past it ------------------------------

# What a held arrival is (HeldArrival.arrival).
ARRIVAL_EVENT = "event"
ARRIVAL_COMPLETION = "completion"
ARRIVAL_CANCEL = "cancel"


@dataclass(frozen=True, slots=True, kw_only=True)
class HeldArrival:
    """Something that would move a WAITING instance on, which it holds while not due: an event
    its open wait (step ``seq``) takes, the completion callback of the effect at ``seq`` it
    awaits, or a cancel request while it is parked at a wait or timer (``name`` and ``event_id``
    are None then)."""

    instance_id: str
    # When the instance is due as the ledger holds it (a wait with no timeout: never).
    available_at: float
    arrival: str
    arrived_at: float
    name: str | None = None
    event_id: str | None = None
    seq: int | None = None


def stuck_arrival(
    held: Sequence[HeldArrival], *, now: float, bounds: DetectionBounds
) -> Finding | None:
    """Arrivals of one instance held past the bound while it sleeps past them: a wake-up was
    lost (the engine's own bug, not a participant's). The scan makes the instance due."""
    old = [h for h in held if now - h.arrived_at >= bounds.arrival_unanswered_seconds]
    if not old:
        return None
    parts = []
    for h in old:
        if h.arrival == ARRIVAL_CANCEL:
            parts.append(f"a cancel request of {_age(now, h.arrived_at)} ago")
        else:
            what = "event" if h.arrival == ARRIVAL_EVENT else "completion callback"
            parts.append(
                f"{what} {h.name!r} ({h.event_id}) for step {h.seq}, received "
                f"{_age(now, h.arrived_at)} ago"
            )
    due = old[0].available_at
    until = "never" if due >= limits.WAIT_FOREVER_AT else f"in {_age(due, now)}"
    return Finding(
        instance_id=old[0].instance_id,
        reason_code=STUCK_ARRIVAL,
        evidence=(
            f"WAITING and due {until}, although it holds {'; '.join(parts)} (bound "
            f"{bounds.arrival_unanswered_seconds:g}s): a wake-up was lost; made due now"
        )[:4000],
    )
