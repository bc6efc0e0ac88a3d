"""Schedules as data: a spec, the nominal instants it names, and how a slot is named (internal).

A schedule declared in code (``registry.schedule(...)``) names a sequence of nominal UTC
instants, its *slots*: every ``every`` seconds (aligned on the epoch), or each match of a cron
expression in the schedule's time zone. A slot's identity is (schedule, spec version, nominal
instant); the instance a slot starts has a business key derived from it
(:func:`slot_key`), so a slot fires at most one instance whoever fires it.

Local time across daylight-saving transitions is decided here, once: an ambiguous wall time
(the clock goes back) is the first of its two instants, so it fires once; a wall time that does
not exist (the clock jumps forward) is the instant the gap ends, so it fires just after the
gap. Two wall times that land on one instant are one slot.

Pure: no clock, no I/O. Example::

    spec = ScheduleSpec(name="nightly", workflow="report", cron="0 2 * * *",
                        tz="Europe/Berlin")
    next_slot(spec, after=time.time())   # the next 02:00 Berlin time, as a UTC epoch
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ledgerflow.errors import RegistrationError

E = TypeVar("E", bound=enum.Enum)

# A schedule's shortest interval: a faster one is a loop, not a schedule.
EVERY_SECONDS_MIN = 1.0
# Jitter may spread a slot's firing over at most this much after its nominal instant.
JITTER_SECONDS_MAX = 3600.0
# How far back catch_up="all" fires late slots by default; older late slots are MISSED.
CATCH_UP_WINDOW_SECONDS = 3600.0
# Slots buffer_all holds at most; a slot past it is SKIPPED ("the buffer is full").
BUFFERED_SLOTS_MAX = 16
# A slot decided more than this after its due instant is late: the catch-up policy decides it.
LATE_AFTER_SECONDS = 60.0
# Cron matches looked at to find one slot (a cron expression that never matches ends here).
_CRON_STEPS_MAX = 10_000


class Overlap(enum.Enum):
    """What a slot does while the instance the schedule fired last is still running."""

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    # Buffer every overlapping slot, up to BUFFERED_SLOTS_MAX; they fire one run after another.
    BUFFER_ALL = "buffer_all"
    # Ask the running instance to cancel (its compensation runs) and buffer the slot: it
    # fires once that instance has ended, as buffer_one's does.
    CANCEL_OTHER = "cancel_other"
    ALLOW_ALL = "allow_all"


class CatchUp(enum.Enum):
    """What the late slots do (after downtime, a pause of every worker, a stalled store)."""

    SKIP = "skip"
    LATEST = "latest"
    ALL = "all"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSpec:
    """A schedule as declared: what it starts, when, and what its late and overlapping slots
    do. Its :meth:`to_json` is what the journal keeps; a change of it is a new spec version."""

    name: str
    workflow: str
    cron: str | None = None
    every_seconds: float | None = None
    input: Any = None
    tz: str = "UTC"
    overlap: Overlap = Overlap.SKIP
    catch_up: CatchUp = CatchUp.LATEST
    catch_up_window_seconds: float = CATCH_UP_WINDOW_SECONDS
    jitter_seconds: float = 0.0
    tenant: str | None = None
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"schedule {self.name!r}"
        if not self.name or ":" in self.name:
            raise RegistrationError(f"{where}: a schedule needs a name without ':'")
        if (self.cron is None) == (self.every_seconds is None):
            raise RegistrationError(f"{where}: give exactly one of cron= or every=")
        if self.every_seconds is not None and not (
            math.isfinite(self.every_seconds) and self.every_seconds >= EVERY_SECONDS_MIN
        ):
            raise RegistrationError(f"{where}: every= must be at least {EVERY_SECONDS_MIN}s")
        if self.cron is not None:
            try:
                # cronsim iterates naive wall time; this only parses the expression.
                CronSim(self.cron, datetime(2000, 1, 1))  # noqa: DTZ001
            except CronSimError as e:
                raise RegistrationError(f"{where}: cron {self.cron!r} is not valid: {e}") from e
        try:
            object.__setattr__(self, "_zone", ZoneInfo(self.tz))
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise RegistrationError(f"{where}: no time zone {self.tz!r}") from e
        if not 0.0 <= self.jitter_seconds <= JITTER_SECONDS_MAX:
            raise RegistrationError(f"{where}: jitter_seconds must be 0..{JITTER_SECONDS_MAX}")
        if not self.catch_up_window_seconds > 0:
            raise RegistrationError(f"{where}: catch_up_window_seconds must be positive")
        try:
            json.dumps(self.input)
        except (TypeError, ValueError) as e:
            raise RegistrationError(f"{where}: input= must be JSON: {e}") from e

    @property
    def zone(self) -> ZoneInfo:
        return self._zone

    def to_json(self) -> str:
        """The spec as the journal keeps it (sorted keys: one spec, one text)."""
        return json.dumps(
            {
                "name": self.name,
                "workflow": self.workflow,
                "cron": self.cron,
                "every_seconds": self.every_seconds,
                "input": self.input,
                "tz": self.tz,
                "overlap": self.overlap.value,
                "catch_up": self.catch_up.value,
                "catch_up_window_seconds": self.catch_up_window_seconds,
                "jitter_seconds": self.jitter_seconds,
                "tenant": self.tenant,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> ScheduleSpec:
        data = json.loads(text)
        return cls(
            name=data["name"],
            workflow=data["workflow"],
            cron=data["cron"],
            every_seconds=data["every_seconds"],
            input=data["input"],
            tz=data["tz"],
            overlap=Overlap(data["overlap"]),
            catch_up=CatchUp(data["catch_up"]),
            catch_up_window_seconds=data["catch_up_window_seconds"],
            jitter_seconds=data["jitter_seconds"],
            tenant=data["tenant"],
        )


def checked_choice(name: str, option: str, kind: type[E], value: E | str) -> E:
    """An enum option given as itself or its value; anything else refuses the registration."""
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(repr(k.value) for k in kind)
        raise RegistrationError(
            f"schedule {name!r}: {option}={value!r} is not one of {choices}"
        ) from None


def _wall(instant: float, zone: ZoneInfo) -> datetime:
    """The naive local wall time of a UTC instant."""
    return datetime.fromtimestamp(instant, zone).replace(tzinfo=None)


def resolve_wall_time(wall: datetime, zone: ZoneInfo) -> float:
    """The UTC instant a naive local wall time names: the first of two (ambiguous), or the
    instant the gap ends (nonexistent)."""
    first = wall.replace(tzinfo=zone, fold=0).timestamp()
    if _wall(first, zone) == wall:
        return first
    # Nonexistent: the gap's end lies between the two readings of it; find its first second.
    low, high = sorted((wall.replace(tzinfo=zone, fold=1).timestamp(), first))
    while high - low > 1.0:
        middle = math.floor((low + high) / 2)
        if _wall(middle, zone) > wall:
            high = middle
        else:
            low = middle
    return high


def next_slot(spec: ScheduleSpec, *, after: float) -> float:
    """The first nominal instant of ``spec`` strictly after ``after`` (UTC epoch seconds)."""
    if spec.every_seconds is not None:
        return (math.floor(after / spec.every_seconds) + 1) * spec.every_seconds
    assert spec.cron is not None
    zone = spec.zone
    # Start an hour of wall time early: after the clock went back, the wall time of ``after``
    # is past instants (the first of each ambiguous pair) that still lie ahead of it.
    matches = CronSim(spec.cron, _wall(after, zone) - timedelta(hours=1))
    for _, wall in zip(range(_CRON_STEPS_MAX), matches, strict=False):
        instant = resolve_wall_time(wall, zone)
        if instant > after:
            return instant
    raise RegistrationError(f"schedule {spec.name!r}: cron {spec.cron!r} names no instant")


def slots_between(spec: ScheduleSpec, *, after: float, until: float, limit: int) -> Iterator[float]:
    """The nominal instants in (after, until], at most ``limit`` of them, in order."""
    instant = after
    for _ in range(limit):
        instant = next_slot(spec, after=instant)
        if instant > until:
            return
        yield instant


def jitter(spec: ScheduleSpec, nominal_at: float) -> float:
    """The slot's delay after its nominal instant: derived from the slot's identity, so every
    worker computes the same one, and spread evenly over ``[0, jitter_seconds)``."""
    if spec.jitter_seconds <= 0:
        return 0.0
    digest = hashlib.sha256(f"{spec.name}:{iso_utc(nominal_at)}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2**64
    return fraction * spec.jitter_seconds


def due_at(spec: ScheduleSpec, nominal_at: float) -> float:
    """When the slot may fire: its nominal instant plus its jitter."""
    return nominal_at + jitter(spec, nominal_at)


def iso_utc(instant: float) -> str:
    """A nominal instant as the slot's name carries it: ISO 8601 in UTC, to the microsecond
    only when it has one (``2026-03-29T01:00:00Z``)."""
    moment = datetime.fromtimestamp(instant, UTC)
    text = moment.isoformat(timespec="microseconds" if moment.microsecond else "seconds")
    return text.replace("+00:00", "Z")


def slot_key(schedule: str, nominal_at: float) -> str:
    """The business key of the instance a slot starts."""
    return f"schedule:{schedule}:{iso_utc(nominal_at)}"


def trigger_key(schedule: str, request_id: str) -> str:
    """The business key of a manual trigger's instance: its own namespace, never a slot's."""
    return f"schedule:{schedule}:trigger:{request_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledBy:
    """What a scheduled instance knows of why it runs (``ctx.scheduled``): its schedule, and
    its slot's nominal instant (None for a manual trigger, with the trigger's request id)."""

    schedule: str
    nominal_at: datetime | None
    trigger_id: str | None = None


def scheduled_by(business_key: str) -> ScheduledBy | None:
    """Read a scheduled instance's business key back (None: not a schedule's)."""
    parts = business_key.split(":", 2)
    if len(parts) != 3 or parts[0] != "schedule":
        return None
    schedule, rest = parts[1], parts[2]
    if rest.startswith("trigger:"):
        return ScheduledBy(schedule=schedule, nominal_at=None, trigger_id=rest[len("trigger:") :])
    try:
        moment = datetime.fromisoformat(rest.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ScheduledBy(schedule=schedule, nominal_at=moment)


class ScheduleDeclarations:
    """The schedules part of :class:`~ledgerflow.model.definition.Registry`: the specs it
    declares, by name."""

    schedules: dict[str, ScheduleSpec]

    def schedule(
        self,
        name: str,
        *,
        workflow: str | Callable[..., Any],
        cron: str | None = None,
        every: float | None = None,
        input: Any = None,
        tz: str = "UTC",
        overlap: Overlap | str = Overlap.SKIP,
        catch_up: CatchUp | str = CatchUp.LATEST,
        catch_up_window_seconds: float | None = None,
        jitter_seconds: float = 0.0,
        tenant: str | None = None,
    ) -> ScheduleSpec:
        """Declare a schedule that starts ``workflow`` (its newest version) with ``input`` at
        each slot: every ``every`` seconds, or each match of ``cron`` in time zone ``tz``.

        ``overlap`` says what a slot does while the instance fired last still runs
        (``"skip"``, ``"buffer_one"``, ``"buffer_all"``: up to :data:`BUFFERED_SLOTS_MAX`, each
        fired when the run before it ends, ``"cancel_other"``: the running instance is asked to
        cancel, compensating, and the slot is buffered until it has ended, ``"allow_all"``);
        ``catch_up`` what late slots do after downtime (``"skip"``, ``"latest"``: fire the
        newest once, ``"all"``: fire those within ``catch_up_window_seconds``); every slot
        that does not fire is recorded with its reason. ``jitter_seconds`` delays each slot
        by an amount derived from its identity. Workers keep the journal's copy of the spec
        in step with this one.

        Example::

            registry.schedule("nightly-report", cron="0 2 * * *", tz="Europe/Berlin",
                              workflow="report", input={"kind": "daily"})
        """
        if name in self.schedules:
            raise RegistrationError(f"schedule {name!r} is declared twice")
        window = (
            {}
            if catch_up_window_seconds is None
            else {"catch_up_window_seconds": catch_up_window_seconds}
        )
        spec = ScheduleSpec(
            name=name,
            workflow=self._workflow_name(workflow),
            cron=cron,
            every_seconds=None if every is None else float(every),
            input=input,
            tz=tz,
            overlap=checked_choice(name, "overlap", Overlap, overlap),
            catch_up=checked_choice(name, "catch_up", CatchUp, catch_up),
            jitter_seconds=float(jitter_seconds),
            tenant=tenant,
            **window,
        )
        self.schedules[name] = spec
        return spec

    def _workflow_name(self, workflow: str | Callable[..., Any]) -> str:
        if isinstance(workflow, str):
            return workflow
        registered = workflow.__dict__.get("__ledgerflow__", [])
        return next(
            (name for registry, name, _ in registered if registry is self),
            getattr(workflow, "__name__", ""),
        )
