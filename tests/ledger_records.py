"""The ledger's records as the tests that talk to a store build them: one way to build each.

Identities come from the model's own derivations (:mod:`ledgerflow.model.ids`: command ids,
effect ids, idempotency keys), so a test's rows are shaped like the engine's; only an
instance id is the test's own, readable one (``wf-acme-order-KEY``). Times are explicit
arguments, so leases expire by arithmetic, never by sleeping.
"""

from __future__ import annotations

import json
from typing import Any

from ledgerflow.ledger.records import (
    Commit,
    EffectRecord,
    EffectWrite,
    InstanceRecord,
    InstanceWrite,
    NewInstance,
    StepRecord,
    StepWrite,
    Write,
)
from ledgerflow.model.effect import EFFECT_MACHINE, EffectEvent, EffectState
from ledgerflow.model.ids import (
    BusinessKey,
    IdempotencyKey,
    InstanceId,
    StepSeq,
    TenantId,
    WorkerId,
    command_id,
    effect_id,
    idempotency_key,
)
from ledgerflow.model.instance import INSTANCE_MACHINE, InstanceEvent, InstanceStatus
from ledgerflow.model.machine import Machine
from ledgerflow.model.step import STEP_MACHINE, StepEvent, StepKind, StepStatus
from ledgerflow.storage.store import Store

LEASE = 10.0
W1, W2, W3, W4 = (WorkerId(f"worker-{n}") for n in range(1, 5))


def new(key: str, *, tenant: str = "acme", workflow: str = "order") -> NewInstance:
    """An instance to start under business key ``key``."""
    return NewInstance(
        instance_id=InstanceId(f"wf-{tenant}-{workflow}-{key}"),
        tenant=TenantId(tenant),
        workflow_name=workflow,
        workflow_version=1,
        fingerprint="fp-1",
        business_key=BusinessKey(key),
        input=json.dumps({"key": key}),
    )


def started(
    store: Store, key: str, *, tenant: str = "acme", workflow: str = "order", now: float = 0.0
) -> InstanceRecord:
    record, _ = store.start_instance(new(key, tenant=tenant, workflow=workflow), now=now)
    return record


def claimed(store: Store, key: str, *, owner: WorkerId = W1, now: float = 1.0) -> InstanceRecord:
    """Start an instance (a second before ``now``) and claim it; the claimed record (owner and
    generation)."""
    record = started(store, key, now=now - 1)
    got = {
        r.instance_id: r for r in store.claim(owner=owner, now=now, lease_seconds=LEASE, limit=64)
    }
    return got[record.instance_id]


def step(
    instance: InstanceRecord,
    seq: int,
    status: StepStatus,
    *,
    attempt: int = 1,
    output: str | None = None,
    next_attempt_at: float | None = None,
    updated_at: float = 0.0,
) -> StepRecord:
    """A local step of the instance's run, named ``step-SEQ``."""
    return StepRecord(
        instance_id=instance.instance_id,
        run=instance.run,
        seq=StepSeq(seq),
        kind=StepKind.LOCAL,
        name=f"step-{seq}",
        command_id=command_id(instance.instance_id, instance.run, StepSeq(seq)),
        status=status,
        attempt=attempt,
        input="[]",
        output=output,
        error=None,
        retry_policy="{}",
        next_attempt_at=next_attempt_at,
        generation=instance.generation,
        updated_at=updated_at,
    )


def effect(
    instance: InstanceRecord,
    seq: int,
    state: EffectState = EffectState.INTENDED,
    *,
    participant: str = "payments",
    operation: str = "charge",
    key: str | None = None,
    evidence: str | None = None,
    attempt: int = 1,
    updated_at: float = 0.0,
) -> EffectRecord:
    """The effect of step ``seq``, its key derived from its identity unless ``key`` is given."""
    identity = effect_id(instance.instance_id, instance.run, StepSeq(seq))
    derived = idempotency_key(
        tenant=instance.tenant, effect=identity, participant=participant, operation=operation
    )
    return EffectRecord(
        effect_id=identity,
        instance_id=instance.instance_id,
        run=instance.run,
        seq=StepSeq(seq),
        participant=participant,
        operation=operation,
        classification="compensatable",
        idempotency_key=IdempotencyKey(key) if key is not None else derived,
        state=state,
        attempt=attempt,
        doubt=0,
        payload='{"amount": 5}',
        evidence=evidence,
        reason=None,
        generation=instance.generation,
        updated_at=updated_at,
    )


def commit_of(instance: InstanceRecord, *writes: Write, owner: WorkerId | None = None) -> Commit:
    """The writes as one commit of the instance's owner, fenced on its generation."""
    return Commit(
        instance_id=instance.instance_id,
        owner=owner or instance.owner or W1,
        generation=instance.generation,
        writes=writes,
    )


def commit_one(store: Store, commit: Commit, *, now: float = 2.0) -> Exception | None:
    """Apply one commit alone; its refusal, or None."""
    [result] = store.commit([commit], now=now)
    return result


# -- writes, each with the event that makes it ------------------------------------------------


def event_between(machine: Machine[Any, Any], state: Any, target: Any) -> Any:
    """The event a test's write names for moving ``state`` to ``target``: a worker's event if
    the table has one, else an operator's; for a move the table does not have (a test of a
    refusal), any event of the machine, which the store then refuses."""
    events = [e for (s, e), t in machine.table.items() if s == state and t == target]
    workers = [e for e in events if e not in machine.operator_only]
    if workers or events:
        return (workers or events)[0]
    return next(iter(machine.table))[1]


def step_write(
    record: StepRecord, expected: StepStatus, event: StepEvent | None = None
) -> StepWrite:
    return StepWrite(
        record=record,
        expected=expected,
        event=event or event_between(STEP_MACHINE, expected, record.status),
    )


def effect_write(
    record: EffectRecord, expected: EffectState, event: EffectEvent | None = None
) -> EffectWrite:
    return EffectWrite(
        record=record,
        expected=expected,
        event=event or event_between(EFFECT_MACHINE, expected, record.state),
    )


def instance_write(
    *,
    status: InstanceStatus,
    expected: InstanceStatus,
    event: InstanceEvent | None = None,
    **changes: Any,
) -> InstanceWrite:
    return InstanceWrite(
        status=status,
        expected=expected,
        event=event or event_between(INSTANCE_MACHINE, expected, status),
        **changes,
    )
