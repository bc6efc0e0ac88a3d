"""What participant code receives for one dispatch of an effect: :class:`EffectCall`, its
identities, payload and deadline, and (an effect declared with ``heartbeat_timeout=``) its
heartbeats (:mod:`ledgerflow.model.heartbeat`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledgerflow.errors import RegistrationError
from ledgerflow.model.heartbeat import HeartbeatAnswer, Heartbeats
from ledgerflow.model.ids import EffectId, IdempotencyKey, InstanceId


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectCall:
    """What participant code receives for one dispatch of an effect (or a compensation)."""

    participant: str
    """The participant's name."""
    operation: str
    """The operation's name."""
    idempotency_key: IdempotencyKey
    """The effect's key, derived from its identity: the same on every attempt and worker.
    Pass it on to the service as its idempotency key."""
    effect_id: EffectId
    """The effect's id in the ledger."""
    instance_id: InstanceId
    """The instance the effect belongs to."""
    attempt: int
    """This dispatch's attempt number (1 first); it never changes the key."""
    payload: Any
    """What the workflow passed to ``ctx.effect`` (for a compensation: the original's)."""
    original_key: IdempotencyKey | None = None
    """Set for a compensation: the key of the effect it undoes."""
    original_evidence: Any = None
    """Set for a compensation: the evidence (receipt) of the effect it undoes."""
    deadline_at: float | None = None
    """When the engine stops waiting for this attempt's answer (seconds since the epoch, on
    the engine's clock): past it the outcome is UNKNOWN, and a later answer is only kept as
    evidence. A participant may pass it on as its own deadline."""
    last_heartbeat: Any = None
    """The details of the last durable heartbeat of an earlier attempt of this effect (an
    effect declared with ``heartbeat_timeout=``), decoded; None when there was none. An
    attempt that resumes long work starts from there."""
    generation: int | None = None
    """The owner generation of the instance when this attempt was dispatched (its lease's
    fence). A broker request carries it and the reply echoes it, so the journal records which
    owner's dispatch the participant answered."""
    heartbeats: Heartbeats | None = field(default=None, repr=False, compare=False)
    """The engine's side of this attempt's heartbeats (internal); None without a
    ``heartbeat_timeout``."""

    async def heartbeat(self, details: Any = None) -> HeartbeatAnswer:
        """Say this attempt is alive, with ``details`` (JSON) for the next attempt if it is
        cut off. Throttled: written at once when the last write is old enough, else kept and
        written with a later one (or when the effect raises). Raises
        :class:`~ledgerflow.errors.AttemptSupersededError` when the attempt is no longer the
        one in flight: stop then, whatever it returns is refused.

        Example::

            @payments.effect(classification="compensatable", heartbeat_timeout=30)
            async def settle_batch(call):
                done = call.last_heartbeat or 0
                for row in rows[done:]:
                    await settle(row)
                    done += 1
                    if (await call.heartbeat(done)).cancel_requested:
                        raise RuntimeError("asked to cancel")  # UNKNOWN, settled by lookup
                return {"settled": done}
        """
        if self.heartbeats is None:
            raise RegistrationError(
                f"effect {self.participant}.{self.operation} declares no heartbeat_timeout: "
                "call.heartbeat() needs one, e.g. @participant.effect(..., heartbeat_timeout=30)"
            )
        return await self.heartbeats.beat(details)
