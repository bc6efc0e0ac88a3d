"""Flow control at the effect's dispatch: ask the store to admit an attempt, wait while it is
THROTTLED (internal).

The gate sits between an attempt's durable intent and its dispatch
(:meth:`~ledgerflow.runtime.effects.EffectDriver.run`): the decision is the store's, one
transaction per ask (:meth:`~ledgerflow.storage.sql_flow.FlowStore.admit_effect`), and the
effect's timeout starts only once it is admitted. A scope without a limit costs no round trip:
the worker knows which scopes are limited from a listing it reads again every
``FLOW_LIMITS_REFRESH_SECONDS``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ledgerflow import limits
from ledgerflow.errors import RegistrationError
from ledgerflow.ledger.records import InstanceRecord
from ledgerflow.model.definition import EffectDeclaration
from ledgerflow.model.flow import AdmissionState, FlowAsk, FlowLimit, effect_scope, flow_key
from ledgerflow.model.flow_order import ONE_FAIRNESS_KEY, PRIORITY_DEFAULT, checked_priority
from ledgerflow.runtime import faults

if TYPE_CHECKING:
    from ledgerflow.runtime.clock import Clock
    from ledgerflow.runtime.store_thread import AsyncStore


def priority(declaration: EffectDeclaration, priority: int | None) -> int:
    """An effect call's priority: its own, else its declaration's (refused when no level)."""
    if priority is None:
        return declaration.priority
    what = f"ctx.effect({declaration.participant.name}.{declaration.operation})"
    try:
        return checked_priority(priority, what=what)
    except ValueError as exc:
        raise RegistrationError(str(exc)) from None


class FlowGate:
    """One worker's view of the effect limits, and the admission of its effects' attempts."""

    def __init__(self, store: AsyncStore, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._limits: dict[str, FlowLimit] = {}
        self._read_at: float | None = None
        self._reading: asyncio.Future[None] | None = None

    async def limit(self, scope: str) -> FlowLimit | None:
        now = self.clock.now()
        if self._read_at is None or now - self._read_at >= limits.FLOW_LIMITS_REFRESH_SECONDS:
            # One listing for every effect that asks meanwhile: a thousand effects dispatched
            # at once must not each read the limits (they did: 1.8 reads per workflow).
            if self._reading is None:
                self._reading = asyncio.ensure_future(self._read(now))
            await asyncio.shield(self._reading)
        return self._limits.get(scope)

    async def _read(self, now: float) -> None:
        try:
            self._limits = {lim.scope: lim for lim in await self.store.effect_limits()}
            self._read_at = now
        finally:
            self._reading = None

    async def admit(
        self,
        instance: InstanceRecord,
        *,
        owner: str,
        payload: Callable[[], Any],
        participant: str,
        operation: str,
        effect_id: str,
        attempt: int,
        wait_until: Callable[[float], Awaitable[None]],
        priority: int = PRIORITY_DEFAULT,
    ) -> None:
        """Return once the attempt is admitted (at once when its scope has no limit); while
        THROTTLED, wait (in the worker, or released with a durable wake-up when long)."""
        scope = effect_scope(participant, operation)
        limit = await self.limit(scope)
        if limit is None:
            return
        tenant, value = str(instance.tenant), payload()
        ask = FlowAsk(
            instance_id=str(instance.instance_id),
            owner=owner,
            generation=int(instance.generation),
            effect_id=effect_id,
            attempt=attempt,
            scope=scope,
            flow_key=flow_key(limit.per, tenant=tenant, payload=value),
            priority=priority,
            fairness_key=flow_key(
                limit.fair_by, tenant=tenant, payload=value, one=ONE_FAIRNESS_KEY
            ),
        )
        while True:
            # A real clock: the database's, read in the admission's transaction (SQLite's is
            # the machine's), so that workers' admissions of one key are stamped in order.
            now = None if self.clock.real_time else self.clock.now()
            admission = await self.store.admit_effect(ask, now=now)
            if admission is None or admission.state is AdmissionState.ADMITTED:
                return
            if faults.plan is not None:
                faults.point(
                    "effect.throttled",
                    instance=instance.business_key,
                    attempt=attempt,
                    operation=f"{participant}.{operation}",
                    reason=admission.reason,
                )
            wait = (admission.retry_at or 0.0) - (admission.now or 0.0)
            if wait > limits.RETRY_INLINE_WAIT_SECONDS_MAX:
                # Given back with a durable wake-up a little early: claimed and replayed again
                # by then, it waits out the rest in the worker and is sent on its slot.
                wait -= limits.FLOW_WAKE_LEAD_SECONDS
            await wait_until(self.clock.now() + wait)

    async def never_sent(self, effect_id: str, attempt: int) -> bool:
        """Whether the attempt is THROTTLED: it waited for its limits and was never sent."""
        admission = await self.store.flow_admission(effect_id, attempt)
        return admission is not None and admission.state is AdmissionState.THROTTLED
