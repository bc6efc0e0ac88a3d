"""An operator's view and changes of flow control on effects (internal): the effect limits,
the attempts waiting THROTTLED, and setting or removing a limit, each change one transaction
with its audit record (the principal's name and role on it).

Example::

    commands = operations.flow()
    commands.set("api", "send", rate_per_second=10, burst=5, per="tenant", reason="quota")
    print([limit_json(lim) for lim in commands.limits()])
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ledgerflow.errors import ConfigurationError, NotAuthorizedError
from ledgerflow.model.authority import ApiRole
from ledgerflow.model.flow import Admission, AdmissionState, FlowLimit, effect_scope
from ledgerflow.model.flow_order import Waiter, order_key
from ledgerflow.operators import actions
from ledgerflow.operators.commands import Caller, Operation
from ledgerflow.runtime.clock import Clock
from ledgerflow.storage.store import Store

# Every change of a limit takes the operator's role; a local actor needs no grant.
FLOW_CHANGE = Operation("flow", ApiRole.OPERATOR, None)


def limit_json(limit: FlowLimit) -> dict[str, Any]:
    shown = dataclasses.asdict(limit)
    shown["weights"] = dict(limit.weights)
    return shown


def _waiter(a: Admission) -> Waiter:
    since = a.throttled_since or 0.0
    return Waiter(a.effect_id, a.attempt, a.priority, a.tag or 0.0, since, a.retry_at)


def admission_json(admission: Admission, *, now: float) -> dict[str, Any]:
    shown = dataclasses.asdict(admission)
    shown["state"] = admission.state.value
    shown.pop("now", None)
    if admission.state is AdmissionState.THROTTLED and admission.throttled_since is not None:
        shown["throttled_seconds"] = round(max(0.0, now - admission.throttled_since), 3)
    return shown


class FlowCommands:
    """The flow-control commands on one store, for one caller (see module)."""

    def __init__(self, store: Store, clock: Clock, caller: Caller) -> None:
        self._store = store
        self._clock = clock
        self._caller = caller

    def limits(self) -> list[FlowLimit]:
        return self._store.effect_limits()

    def throttled(self) -> list[dict[str, Any]]:
        """The attempts waiting THROTTLED now, with how long they have waited, each flow key's
        in the order they are admitted (model/flow_order.py)."""
        now = self._clock.now()
        found = self._store.flow_admissions(state=AdmissionState.THROTTLED)
        found.sort(key=lambda a: (a.scope, a.flow_key, order_key(_waiter(a))))
        return [admission_json(a, now=now) for a in found]

    def set(
        self, participant: str, operation: str, *, reason: str = "", **bounds: Any
    ) -> FlowLimit:
        scope = effect_scope(participant, operation)
        try:
            limit = FlowLimit(scope=scope, **bounds)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"effect limit {scope}: {exc}") from None
        self._change(actions.FLOW_LIMIT_SET, scope, limit, reason, limit_json(limit))
        return limit

    def remove(self, participant: str, operation: str, *, reason: str = "") -> bool:
        scope = effect_scope(participant, operation)
        had = any(lim.scope == scope for lim in self._store.effect_limits())
        self._change(actions.FLOW_LIMIT_REMOVE, scope, None, reason, {}, changed=had)
        return had

    def _change(self, kind: str, scope: str, limit: FlowLimit | None, reason: str,
                arguments: dict[str, Any], *, changed: bool = True) -> None:  # fmt: skip
        try:
            role = self._caller.authorize(FLOW_CHANGE)
        except NotAuthorizedError as exc:
            actions.record_refusal(
                self._store, self._clock, actor=self._caller.actor, role=self._caller.role,
                kind=kind, instance_id=None, target=scope, reason=reason,
                arguments=arguments, error=exc,
            )  # fmt: skip
            raise
        with self._store.transaction():
            self._store.set_effect_limit(limit, scope=scope)
            actions.record_action(
                self._store, self._clock, actor=self._caller.actor, role=role, kind=kind,
                instance_id=None, target=scope, outcome="applied" if changed else "no-op",
                reason=reason, arguments=arguments,
            )  # fmt: skip
