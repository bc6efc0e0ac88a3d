"""The operators' service for asyncio code, on an engine's store (internal).

:class:`AsyncOperations` offers what :class:`~ledgerflow.operators.service.Operations` offers,
awaitable, for code that already runs an :class:`~ledgerflow.runtime.engine.Engine` (a worker's
periodic reconciliation, a console served by asyncio). It shares the engine's store and its
store thread: what the engine answers (instances, their results) it asks the engine; the
operator's own calls and every change (starts, cancels, signals, callbacks, repairs: with the
role check and the audit record the synchronous service makes, in the change's transaction)
run the synchronous service's on the store thread, as every call on that store does, and the
engine's workers are then told of what arrived. Closing the engine closes both.

Example::

    async with Engine("sqlite:///orders.db", registry) as engine:
        operations = AsyncOperations(engine)
        worker = engine.worker(
            periodic=[operations.reconcile_task(registry, interval_seconds=600)]
        )
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from ledgerflow import limits
from ledgerflow.ledger.reconciliation import ReconciliationRun
from ledgerflow.ledger.records import InstanceRecord
from ledgerflow.model.definition import Registry
from ledgerflow.operators.authority import Authority
from ledgerflow.operators.reconcile import reconcile
from ledgerflow.operators.service import (
    Operations,
    Principal,
    ScopedOperations,
)
from ledgerflow.runtime.engine import Delivered, Engine
from ledgerflow.runtime.periodic import PeriodicTask

__all__ = ["AsyncOperations"]

T = TypeVar("T")
P = ParamSpec("P")


def _on_store_thread(
    method: Callable[Concatenate[Operations, P], T],
    *,
    then: Callable[[Engine, T], None] | None = None,
) -> Callable[Concatenate[AsyncOperations, P], Coroutine[Any, Any, T]]:
    """The synchronous service's ``method``, awaitable: the same call with the same arguments
    (its role check and audit record with it), on the engine's store thread; ``then`` tells
    the engine what the answer means for its workers (a delivery to wake, a cancel to stop)."""

    @functools.wraps(method)
    async def adapted(self: AsyncOperations, /, *args: P.args, **kwargs: P.kwargs) -> T:
        answer = await self._thread.call(method, self._operations, *args, **kwargs)
        if then is not None:
            then(self._engine, answer)
        return answer

    return adapted


def _the_engines(
    method: Callable[Concatenate[Engine, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[AsyncOperations, P], Coroutine[Any, Any, T]]:
    """The engine's own ``method``: what it answers (an instance, a wait for its end) it is
    asked, with the same arguments."""

    @functools.wraps(method)
    async def forwarded(self: AsyncOperations, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await method(self._engine, *args, **kwargs)

    return forwarded


def _woken(engine: Engine, delivered: Delivered) -> None:
    engine.notice_delivery(delivered)


def _stopping(engine: Engine, record: InstanceRecord) -> None:
    engine.notice_cancel(record.instance_id)


class AsyncOperations:
    """What an operator may do to an engine's store, for asyncio code."""

    def __init__(self, engine: Engine, *, authority: Authority | None = None) -> None:
        self._engine = engine
        self._thread = engine.store_thread
        # The same calls as the synchronous service's, on the engine's store (never closed
        # here: the engine owns it).
        self._operations = Operations(
            engine.store,
            authority=authority,
            registry=engine.registry,
            clock=engine.clock,
            codec=engine.codec,
        )

    @property
    def authority(self) -> Authority:
        return self._operations.authority

    async def as_principal(self, principal: Principal, call: Callable[[ScopedOperations], T]) -> T:
        """``call`` on the service as ``principal`` sees it (its tenant, its role, its name on
        the audit record: :meth:`Operations.acting_as`), on the store thread.

        Example::

            page = await operations.as_principal(principal, lambda ops: ops.page(query))
        """
        scoped = self._operations.acting_as(principal)
        return await self._thread.call(call, scoped)

    # -- instances: the engine answers ---------------------------------------------------------

    detail = _the_engines(Engine.detail)
    wait = _the_engines(Engine.wait)
    show = _on_store_thread(Operations.show)
    find = _on_store_thread(Operations.find)

    async def result(self, instance_id: str, *, timeout: float = 0.0) -> Any:
        """The workflow's result now (``timeout`` 0: no wait, unlike the engine's default)."""
        return await self._engine.result(instance_id, timeout=timeout)

    # -- changes: the synchronous service's, with its role check and audit, on the store thread
    # (Operations.start, .cancel, .signal...); a delivery wakes the engine's waiting instance,
    # a cancel stops the engine's worker that drives it before its next step.

    start = _on_store_thread(Operations.start)
    cancel = _on_store_thread(Operations.cancel, then=_stopping)
    signal = _on_store_thread(Operations.signal, then=_woken)
    complete_effect = _on_store_thread(Operations.complete_effect, then=_woken)
    retire = _on_store_thread(Operations.retire)
    upgrade = _on_store_thread(Operations.upgrade)
    migrate_instances = _on_store_thread(Operations.migrate_instances)

    # -- the operator's own calls, on the store thread -----------------------------------------

    attention = _on_store_thread(Operations.attention)
    scan = _on_store_thread(Operations.scan)
    workers = _on_store_thread(Operations.workers)
    plan = _on_store_thread(Operations.plan)
    apply = _on_store_thread(Operations.apply)
    audit = _on_store_thread(Operations.audit)
    reconciliations = _on_store_thread(Operations.reconciliations)

    async def reconcile(
        self,
        registry: Registry,
        *,
        limit: int = limits.RECONCILE_LIMIT_DEFAULT,
        max_corrections: int = limits.RECONCILE_CORRECTIONS_DEFAULT,
        dry_run: bool = False,
    ) -> ReconciliationRun:
        """One bounded reconciliation with the participants of ``registry``, attributed to the
        reconciler, its store calls on the engine's store thread."""
        return await reconcile(
            self._thread,
            registry,
            repairs=self._operations.repairs(),
            limit=limit,
            max_corrections=max_corrections,
            clock=self._engine.clock,
            dry_run=dry_run,
        )

    def reconcile_task(
        self,
        registry: Registry,
        *,
        interval_seconds: float,
        limit: int = limits.RECONCILE_LIMIT_DEFAULT,
        max_corrections: int = limits.RECONCILE_CORRECTIONS_DEFAULT,
    ) -> PeriodicTask:
        """Reconciliation as a worker's periodic task (``engine.worker(periodic=[...])``). The
        authority is read now, so that a wrong one stops the worker from starting."""
        repairs = self._operations.repairs()

        async def run() -> None:
            finished = await reconcile(
                self._thread,
                registry,
                repairs=repairs,
                limit=limit,
                max_corrections=max_corrections,
                clock=self._engine.clock,
            )
            if self._engine.metrics is not None:
                self._engine.metrics.reconciled(
                    matched=finished.matched,
                    corrected=finished.corrected,
                    escalated=finished.escalated,
                    unreachable=finished.unreachable,
                )

        return PeriodicTask(name="reconcile", interval_seconds=interval_seconds, run=run)

    # Last in the class: below it, ``list`` in an annotation would name this method.
    list = _the_engines(Engine.list)
