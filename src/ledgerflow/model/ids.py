"""Identity types and how idempotency keys are derived from them.

Every identity of docs/design.md has its own type, so an effect id can never be passed where an
instance id is expected. Keys are derived from identities only: the same effect always gets the
same key, whatever the attempt, the worker or the process. Nothing here is random.
"""

from __future__ import annotations

from typing import NewType

TenantId = NewType("TenantId", str)
BusinessKey = NewType("BusinessKey", str)
InstanceId = NewType("InstanceId", str)
RunNumber = NewType("RunNumber", int)
StepSeq = NewType("StepSeq", int)
CommandId = NewType("CommandId", str)
EffectId = NewType("EffectId", str)
IdempotencyKey = NewType("IdempotencyKey", str)
Generation = NewType("Generation", int)
WorkerId = NewType("WorkerId", str)

DEFAULT_TENANT = TenantId("default")


def command_id(instance_id: InstanceId, run: RunNumber, seq: StepSeq) -> CommandId:
    """The stable identity of the request a step sends; equal across attempts."""
    return CommandId(f"{instance_id}/r{run}/s{seq}")


def effect_id(instance_id: InstanceId, run: RunNumber, seq: StepSeq) -> EffectId:
    """The identity of the state change a step's command causes at its participant."""
    return EffectId(f"{instance_id}/r{run}/s{seq}/effect")


def idempotency_key(
    *, tenant: TenantId, effect: EffectId, participant: str, operation: str
) -> IdempotencyKey:
    """The key a participant deduplicates on: derived from identity, never from an attempt.

    The effect id alone makes the key unique (it names the instance, run and step). The
    participant and operation are added so a participant sharing one deduplication table
    across operations can read what a key is for; they are joined by "/", which names may not
    contain, so no two (participant, operation) pairs read alike.
    """
    return IdempotencyKey(f"lf:{tenant}:{participant}/{operation}:{effect}")


def compensation_key(original: IdempotencyKey) -> IdempotencyKey:
    """A compensation's own key, in its own namespace: never the original key."""
    return IdempotencyKey(f"compensate:{original}")
