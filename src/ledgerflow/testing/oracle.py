"""The oracle: the invariants of docs/design.md, checked after a run from the store and from the
participants' own records.

Nothing here trusts the engine's account alone: an effect the ledger calls CONFIRMED must be
in the participant's record, and every application in the participant's record must be known
to the ledger. Each check returns :class:`Violation` values naming the invariant.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ledgerflow import limits
from ledgerflow.ledger.audit import AuditQuery
from ledgerflow.ledger.delivery import DeliveryState
from ledgerflow.ledger.locks import LockRecord
from ledgerflow.ledger.records import (
    Delivery,
    EffectRecord,
    InstanceRecord,
    RunRecord,
    StepRecord,
    TimelineEntry,
)
from ledgerflow.ledger.values import Published
from ledgerflow.model.effect import EFFECT_MACHINE, EffectState
from ledgerflow.model.flow import Admission
from ledgerflow.model.ids import InstanceId, RunNumber
from ledgerflow.model.instance import (
    FINAL_STATUSES,
    INSTANCE_MACHINE,
    TERMINAL_STATUSES,
    InstanceStatus,
)
from ledgerflow.model.machine import Machine
from ledgerflow.model.signal import LOCK_GRANT_PREFIX
from ledgerflow.model.step import STEP_MACHINE, StepKind, StepStatus
from ledgerflow.operators import actions
from ledgerflow.storage.store import Store
from ledgerflow.testing.capability_checks import capability_checks
from ledgerflow.testing.participants import World
from ledgerflow.testing.schedule_checks import one_firing_per_slot as one_firing_per_slot
from ledgerflow.testing.violations import Violation as Violation

COMPENSATION_PREFIX = "compensate:"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the oracle reads, taken once after quiescence."""

    instances: list[InstanceRecord]
    effects: dict[InstanceId, list[EffectRecord]]
    events: dict[InstanceId, list[TimelineEntry]]
    inbox: dict[InstanceId, list[Delivery]] = field(default_factory=dict)
    # Every run's steps (oldest run first) and the closed runs' rows of history.
    steps: dict[InstanceId, list[StepRecord]] = field(default_factory=dict)
    runs: dict[InstanceId, list[RunRecord]] = field(default_factory=dict)
    # The held durable locks, each with its holder's status and its queue.
    locks: list[LockRecord] = field(default_factory=list)
    # What each instance published (ctx.publish), one row per name.
    values: dict[InstanceId, list[Published]] = field(default_factory=dict)
    flow: list[Admission] = field(default_factory=list)  # each limited effect's admissions

    @classmethod
    def of(cls, store: Store, *, limit: int = 1_000_000) -> Snapshot:
        instances = store.list_instances(limit=limit)
        return cls(
            instances=instances,
            effects={i.instance_id: store.effects(i.instance_id) for i in instances},
            events={i.instance_id: store.timeline(i.instance_id) for i in instances},
            inbox={i.instance_id: store.inbox(i.instance_id) for i in instances},
            steps={i.instance_id: _every_run_steps(store, i) for i in instances},
            runs={i.instance_id: store.runs(i.instance_id) for i in instances},
            locks=store.locks(),
            values={i.instance_id: store.published_values(i.instance_id) for i in instances},
            flow=store.flow_admissions(),
        )


def _every_run_steps(store: Store, instance: InstanceRecord) -> list[StepRecord]:
    journals = store.journals(
        [(instance.instance_id, RunNumber(r)) for r in range(1, instance.run + 1)]
    )
    return [
        step
        for (_, _), journal in sorted(journals.items(), key=lambda item: item[0][1])
        for _, step in sorted(journal.steps.items())
    ]


def history_position(run: int, seq: int) -> int:
    """A step's place in its instance's whole history (runs one after another; a negative
    position, a compensation's, is one already)."""
    return seq if seq < 0 else (run - 1) * limits.STEPS_PER_INSTANCE_MAX + seq


def check(snapshot: Snapshot, world: World) -> list[Violation]:
    return [
        *compensated_means_undone(snapshot, world),
        *no_duplicate_effect(world),
        *no_lost_completion(snapshot, world),
        *single_terminal_outcome(snapshot),
        *compensations_only_for_applied(world),
        *dependencies_in_order(snapshot, world),
        *no_stale_write(snapshot),
        *legal_transitions(snapshot),
        *failed_only_without_effects(snapshot),
        *one_copy_at_a_time(world),
        *requests_answered(snapshot),
        *no_new_effect_after_cancel(snapshot),
        *endings_name_their_cause(snapshot),
        *late_answers_never_confirm(snapshot, world),
        *doubt_parked_only_when_lookups_are_spent(snapshot, world),
        *one_child_per_position(snapshot),
        *child_endings_reach_their_parent(snapshot),
        *capability_checks(snapshot),
    ]


def no_duplicate_effect(world: World) -> Iterable[Violation]:
    """I1: one effect identity (key) is applied at most once at its participant."""
    counts = Counter((a.participant, a.key) for a in world.applications)
    for (participant, key), n in counts.items():
        if n > 1:
            yield Violation("no-duplicate-effect", None, f"{participant} applied {key} {n} times")


def no_lost_completion(snapshot: Snapshot, world: World) -> Iterable[Violation]:
    """I2: every application is known to the ledger as CONFIRMED, or is an UNKNOWN effect of an
    instance parked for a person; and every CONFIRMED effect was really applied."""
    by_key = {e.idempotency_key: e for effects in snapshot.effects.values() for e in effects}
    status = {i.instance_id: i.status for i in snapshot.instances}
    applied = {(a.participant, a.key) for a in world.applications}
    for a in world.applications:
        effect = by_key.get(a.key)  # type: ignore[call-overload]
        if effect is None:
            yield Violation(
                "no-lost-completion",
                None,
                f"{a.participant} applied {a.key}, which the ledger does not know",
            )
        elif effect.state is not EffectState.CONFIRMED and not (
            effect.state is EffectState.UNKNOWN
            and status[effect.instance_id] is InstanceStatus.MANUAL_INTERVENTION
        ):
            yield Violation(
                "no-lost-completion",
                effect.instance_id,
                f"{a.participant} applied {a.key} but the ledger holds {effect.state.value} "
                f"in a {status[effect.instance_id].value} instance",
            )
    for effect in by_key.values():
        if (
            effect.state is EffectState.CONFIRMED
            and (effect.participant, effect.idempotency_key) not in applied
            and (effect.participant, effect.idempotency_key) not in world.drifted
        ):
            yield Violation(
                "no-phantom-confirmation",
                effect.instance_id,
                f"{effect.idempotency_key} is CONFIRMED but {effect.participant} never applied it",
            )


def single_terminal_outcome(snapshot: Snapshot) -> Iterable[Violation]:
    """I3 and I6: every instance is terminal (or visibly waiting), and it became terminal
    exactly once."""
    for instance in snapshot.instances:
        if instance.status not in TERMINAL_STATUSES and instance.status not in (
            InstanceStatus.WAITING,
            InstanceStatus.SCHEDULED,
        ):
            yield Violation(
                "no-stuck-instance",
                instance.instance_id,
                f"still {instance.status.value} after quiescence",
            )
        endings = [
            e
            for e in snapshot.events[instance.instance_id]
            if e.subject == "instance" and InstanceStatus(e.to_state) in TERMINAL_STATUSES
        ]
        if instance.status in TERMINAL_STATUSES and len(endings) != 1:
            yield Violation(
                "single-terminal-outcome",
                instance.instance_id,
                f"{len(endings)} terminal transitions: {[e.to_state for e in endings]}",
            )


def compensations_only_for_applied(world: World) -> Iterable[Violation]:
    """A compensation runs only for an applied effect, at most once, never under its key."""
    originals = {(a.participant, a.key) for a in world.applications}
    counts = Counter(
        (a.participant, a.key) for a in world.applications if a.key.startswith(COMPENSATION_PREFIX)
    )
    for (participant, key), n in counts.items():
        original = key[len(COMPENSATION_PREFIX) :]
        if (participant, original) not in originals:
            yield Violation(
                "compensation-only-for-applied",
                None,
                f"{participant} compensated {original}, which it never applied",
            )
        if n > 1:
            yield Violation("compensation-at-most-once", None, f"{key} applied {n} times")


def dependencies_in_order(snapshot: Snapshot, world: World) -> Iterable[Violation]:
    """I4: an instance's effects reach their participants in step order (in any order when
    the scenario runs them in parallel branches), and its compensations in reverse step
    order, after the effects they undo."""
    seq_of = {
        e.idempotency_key: (e.instance_id, history_position(e.run, e.seq))
        for effects in snapshot.effects.values()
        for e in effects
    }
    forward: dict[InstanceId, int] = {}
    backward: dict[InstanceId, int] = {}
    for a in world.applications:
        found = seq_of.get(a.key)  # type: ignore[call-overload]
        if found is None:
            continue
        instance_id, seq = found
        if seq > 0 and instance_id in backward:
            yield Violation(
                "dependencies-in-order", instance_id, f"step {seq} applied during compensation"
            )
        if seq > 0 and seq < forward.get(instance_id, 0) and not world.branches:
            yield Violation(
                "dependencies-in-order",
                instance_id,
                f"step {seq} applied after step {forward[instance_id]}",
            )
        if seq < 0 and -seq > backward.get(instance_id, -seq):
            yield Violation(
                "compensations-in-reverse-order",
                instance_id,
                f"step {-seq} compensated after step {backward[instance_id]}",
            )
        if seq > 0:
            forward[instance_id] = max(forward.get(instance_id, 0), seq)
        else:
            backward[instance_id] = min(backward.get(instance_id, -seq), -seq)


def compensated_means_undone(snapshot: Snapshot, world: World) -> Iterable[Violation]:
    """COMPENSATED claims every confirmed effect was undone: each has a compensation that the
    participant applied once, or whose precondition showed it already undone."""
    applied = Counter((a.participant, a.key) for a in world.applications)
    for instance in snapshot.instances:
        if instance.status is not InstanceStatus.COMPENSATED:
            continue
        effects = snapshot.effects[instance.instance_id]
        undoing = {e.compensates: e for e in effects if e.compensates is not None}
        for effect in effects:
            if effect.compensates is not None or effect.state is not EffectState.CONFIRMED:
                continue
            undo = undoing.get(effect.effect_id)
            if undo is None or undo.state not in (EffectState.CONFIRMED, EffectState.SATISFIED):
                yield Violation(
                    "compensated-means-undone",
                    instance.instance_id,
                    f"{effect.participant}.{effect.operation} (step {effect.seq}) is not undone",
                )
            elif (
                undo.state is EffectState.CONFIRMED
                and applied[(undo.participant, undo.idempotency_key)] != 1
            ):
                yield Violation(
                    "compensated-means-undone",
                    instance.instance_id,
                    f"{undo.idempotency_key} applied "
                    f"{applied[(undo.participant, undo.idempotency_key)]} times",
                )


def no_stale_write(snapshot: Snapshot) -> Iterable[Violation]:
    """I5: after an owner claims a generation, no write of an older generation lands."""
    for instance_id, events in snapshot.events.items():
        newest = 0
        for event in events:
            if event.subject == "owner" and event.detail == "claimed":
                newest = max(newest, event.generation)
            elif event.generation < newest:
                yield Violation(
                    "no-stale-write",
                    instance_id,
                    f"generation {event.generation} wrote {event.subject} "
                    f"{event.from_state}->{event.to_state} after generation {newest} claimed",
                )


_MACHINES: Sequence[tuple[str, Machine]] = (  # type: ignore[type-arg]
    ("instance", INSTANCE_MACHINE),
    ("step:", STEP_MACHINE),
    ("effect:", EFFECT_MACHINE),
)


def legal_transitions(snapshot: Snapshot) -> Iterable[Violation]:
    """I8: every recorded change is an edge of its state machine."""
    for instance_id, events in snapshot.events.items():
        for event in events:
            for prefix, machine in _MACHINES:
                if not event.subject.startswith(prefix) or event.from_state is None:
                    continue
                states = {s.value: s for s in type(next(iter(machine.table))[0])}
                source, target = states.get(event.from_state), states.get(event.to_state)
                if source is None or target is None or target not in machine.targets(source):
                    yield Violation(
                        "legal-transitions",
                        instance_id,
                        f"{event.subject}: {event.from_state} -> {event.to_state}",
                    )


def failed_only_without_effects(snapshot: Snapshot) -> Iterable[Violation]:
    """FAILED claims nothing happened anywhere: no confirmed effect may exist."""
    for instance in snapshot.instances:
        if instance.status is InstanceStatus.FAILED:
            confirmed = [
                e
                for e in snapshot.effects[instance.instance_id]
                if e.state is EffectState.CONFIRMED
            ]
            if confirmed:
                yield Violation(
                    "failed-only-without-effects",
                    instance.instance_id,
                    f"FAILED with {len(confirmed)} confirmed effect(s)",
                )


def one_copy_at_a_time(world: World) -> Iterable[Violation]:
    """No two copies of one instance run at once: its workflow code never runs twice together,
    and a participant never has two of its calls in flight (an abandoned call excepted)."""
    for overlap in world.overlaps:
        yield Violation(
            "one-copy-at-a-time",
            overlap.instance_id,
            f"{overlap.second} began while {overlap.first} was still running",
        )


def requests_answered(snapshot: Snapshot) -> Iterable[Violation]:
    """Every accepted cancel request and every accepted event ends with an outcome the caller
    can read: once an instance has ended for good, its request is honoured (CANCELLED) or
    recorded as overtaken, and no event of it is still pending."""
    for instance in snapshot.instances:
        if instance.status not in FINAL_STATUSES:
            continue
        if instance.cancel_requested_at is not None:
            expected = "honoured" if instance.status is InstanceStatus.CANCELLED else "overtaken"
            if instance.cancel_outcome != expected:
                yield Violation(
                    "cancel-request-answered",
                    instance.instance_id,
                    f"ended {instance.status.value} with a cancel request whose outcome is "
                    f"{instance.cancel_outcome!r}, not {expected!r}",
                )
        for delivery in snapshot.inbox.get(instance.instance_id, []):
            if delivery.state is DeliveryState.PENDING:
                yield Violation(
                    "event-answered",
                    instance.instance_id,
                    f"event {delivery.event_id} ({delivery.name}) is still pending after the "
                    f"instance ended {instance.status.value}",
                )


def no_new_effect_after_cancel(snapshot: Snapshot) -> Iterable[Violation]:
    """Once a cancel request is recorded, no new effect of the instance is intended (only
    compensations, at negative positions)."""
    for instance_id, events in snapshot.events.items():
        asked = False
        for event in events:
            if event.subject == "cancel" and event.to_state == "requested":
                asked = True
            elif (
                asked
                and event.subject.startswith("effect:")
                and int(event.subject.removeprefix("effect:")) > 0
                and event.from_state == EffectState.NEW.value
            ):
                yield Violation(
                    "no-new-effect-after-cancel",
                    instance_id,
                    f"{event.subject} was intended after the cancel request",
                )


def endings_name_their_cause(snapshot: Snapshot) -> Iterable[Violation]:
    """Every terminal state but SUCCEEDED keeps what led to it."""
    for instance in snapshot.instances:
        if instance.status in TERMINAL_STATUSES - {InstanceStatus.SUCCEEDED} and not (
            instance.cause
        ):
            yield Violation(
                "ending-names-its-cause",
                instance.instance_id,
                f"{instance.status.value} ({instance.reason_code}) names no cause",
            )


def one_child_per_position(snapshot: Snapshot) -> Iterable[Violation]:
    """I8: a parent's journal position started at most one child, and every child's parent
    exists."""
    known = {i.instance_id for i in snapshot.instances}
    children: defaultdict[tuple[str, int | None, int | None], list[str]] = defaultdict(list)
    for instance in snapshot.instances:
        parent = instance.parent_instance_id
        if parent is None:
            continue
        if parent not in known:
            yield Violation(
                "one-child-per-position", instance.instance_id, f"its parent {parent} is not there"
            )
        children[(parent, instance.parent_run, instance.parent_seq)].append(instance.instance_id)
    for (parent_id, run, seq), ids in children.items():
        if len(ids) > 1:
            yield Violation(
                "one-child-per-position",
                parent_id,
                f"run {run} step {seq} started {len(ids)} children: {', '.join(sorted(ids))}",
            )


def child_endings_reach_their_parent(snapshot: Snapshot) -> Iterable[Violation]:
    """Every child that ended has its ending, with its status, in its parent's inbox
    (taken by the parent, or kept as refused when the parent could no longer take it)."""
    for instance in snapshot.instances:
        parent = instance.parent_instance_id
        if parent is None or instance.status not in TERMINAL_STATUSES:
            continue
        name = f"child:{instance.instance_id}"
        statuses = {
            json.loads(d.payload).get("status")
            for d in snapshot.inbox.get(InstanceId(parent), [])
            if d.name == name
        }
        if instance.status.value not in statuses:
            yield Violation(
                "child-ending-reaches-its-parent",
                instance.instance_id,
                f"ended {instance.status.value}, but parent {parent}'s inbox holds no such "
                f"ending of it (holds: {sorted(s for s in statuses if s) or 'none'})",
            )


def late_answers_never_confirm(snapshot: Snapshot, world: World) -> Iterable[Violation]:
    """An answer given after its call's deadline never confirms the effect on its own: the
    evidence of a CONFIRMED effect is never such an answer."""
    late = {(participant, key) for participant, key, _ in world.late_answers}
    for effects in snapshot.effects.values():
        for effect in effects:
            if effect.state is not EffectState.CONFIRMED:
                continue
            if (effect.participant, effect.idempotency_key) not in late:
                continue
            evidence = json.loads(effect.evidence or "null")
            if isinstance(evidence, dict) and evidence.get("late"):
                yield Violation(
                    "late-answer-never-confirms",
                    effect.instance_id,
                    f"{effect.idempotency_key} was confirmed by the answer its participant gave "
                    "after the deadline",
                )


def doubt_parked_only_when_lookups_are_spent(
    snapshot: Snapshot, world: World
) -> Iterable[Violation]:
    """A lookup that could not be asked is no answer: an instance is parked for an unknown
    outcome because of an unreachable lookup only once its lookup policy is spent."""
    for instance in snapshot.instances:
        if instance.reason_code != "effect_outcome_unknown":
            continue
        for effect in snapshot.effects[instance.instance_id]:
            misses = world.lookup_misses.get((effect.participant, effect.idempotency_key), 0)
            bound = world.lookup_attempts_max.get(effect.participant)
            if effect.state is EffectState.UNKNOWN and bound and 0 < misses < bound:
                yield Violation(
                    "doubt-parked-only-when-lookups-are-spent",
                    instance.instance_id,
                    f"parked after {misses} unreachable lookup(s) of {effect.idempotency_key}; "
                    f"its lookup policy allows {bound}",
                )


def changes_audited(store: Store, *, limit: int = 100_000) -> list[Violation]:
    """Every change made from outside has the audit record of the call that made it (the
    design's invariant 7): each instance its start, each event in an inbox its signal or
    callback (accepted or refused), each cancel request its cancel, all ``applied`` (a
    refused delivery ``refused``). For a journal whose every start, signal, callback and
    cancel came through the operators' service (the CLI, the HTTP API, the console): the
    library's :class:`~ledgerflow.Engine` calls write no audit record."""
    records = []
    before: int | None = None
    while True:
        page = store.audit_records(AuditQuery(before_id=before, limit=limits.AUDIT_LIMIT_MAX))
        records.extend(page)
        if len(page) < limits.AUDIT_LIMIT_MAX:
            break
        before = page[0].audit_id
    applied = {(r.kind, r.instance_id) for r in records if r.outcome == "applied"}
    delivered = {
        (r.instance_id, r.target)
        for r in records
        if r.kind in (actions.SIGNAL, actions.COMPLETE_EFFECT)
        and r.outcome in ("applied", "refused")
    }
    found: list[Violation] = []
    for instance in store.list_instances(limit=limit):
        iid = instance.instance_id
        if (actions.START, iid) not in applied:
            found.append(Violation("changes_audited", iid, "started with no audit record"))
        if instance.cancel_requested_at is not None and (actions.CANCEL, iid) not in applied:
            found.append(Violation("changes_audited", iid, "a cancel request with no audit record"))
        for event in store.inbox(iid):
            if (iid, f"{event.name} {event.event_id}") not in delivered:
                found.append(
                    Violation(
                        "changes_audited",
                        iid,
                        f"event {event.event_id!r} ({event.name}) kept with no audit record",
                    )
                )
    return found


def lost_wakeups(store: Store, *, now: float) -> list[Violation]:
    """I2 and I6 at a quiet moment (nothing is due ``now``): no waiting instance sleeps past
    what would move it on. Judged from the ledger's facts, not from the engine's own scan: an
    event pending for a wait its run has open, a pending callback of an effect it awaits, or a
    cancel request not yet answered while it waits at a wait or timer (with no effect in
    flight, which finishes first)."""
    found: list[Violation] = []
    for instance in store.list_instances(status=InstanceStatus.WAITING, limit=1_000_000):
        if instance.available_at <= now:
            continue
        journal = store.journal(instance.instance_id, instance.run)
        open_waits = {
            s.name
            for s in journal.steps.values()
            if s.status is StepStatus.STARTED and s.kind in (StepKind.WAIT, StepKind.TIMER)
        }
        awaited = {
            f"complete:{e.effect_id}"
            for e in journal.effects.values()
            if e.state is EffectState.ACCEPTED
        } | {
            LOCK_GRANT_PREFIX + s.name.removeprefix("lock:")
            for s in journal.steps.values()
            if s.status is StepStatus.STARTED and s.kind is StepKind.LOCK
        }
        for delivery in store.inbox(instance.instance_id):
            if delivery.state is not DeliveryState.PENDING:
                continue
            if f"wait:{delivery.name}" in open_waits or delivery.name in awaited:
                found.append(
                    Violation(
                        "no-lost-wakeup",
                        instance.instance_id,
                        f"WAITING until {instance.available_at:.0f} (now {now:.0f}) with "
                        f"{delivery.name!r} ({delivery.event_id}) pending for it",
                    )
                )
        asked = instance.cancel_requested_at is not None and instance.cancel_outcome is None
        if asked and open_waits and not awaited:
            found.append(
                Violation(
                    "no-lost-wakeup",
                    instance.instance_id,
                    f"WAITING until {instance.available_at:.0f} (now {now:.0f}) at "
                    f"{sorted(open_waits)} with a cancel request not yet answered",
                )
            )
    return found


def stuck(snapshot: Snapshot) -> list[InstanceRecord]:
    return [
        i
        for i in snapshot.instances
        if i.status not in TERMINAL_STATUSES
        and i.status not in (InstanceStatus.WAITING, InstanceStatus.SCHEDULED)
    ]


def by_instance(violations: Iterable[Violation]) -> dict[str | None, list[Violation]]:
    grouped: dict[str | None, list[Violation]] = defaultdict(list)
    for v in violations:
        grouped[v.instance_id].append(v)
    return grouped
