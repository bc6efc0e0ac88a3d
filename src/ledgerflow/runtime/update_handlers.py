"""Declared update handlers, run at the workflow's waits (internal; ``ctx.on_update``).

``ctx.handle_updates`` is a wait of its own. A handler declared with ``ctx.on_update(name,
handler)`` instead answers update requests at *whichever* wait the workflow is in -- a timer,
an event, an approval, a lock -- and the wait goes on waiting for what it waits for.

The handler is workflow code, not a step: it runs again on every replay with the payload the
journal recorded, so what it changes in the workflow's own variables is rebuilt the same way,
and what it does that is not deterministic goes through ``ctx.step`` / ``ctx.effect`` as
anywhere else. Its journal positions follow the wait's own position:

- ``N``      the wait (started before anything is handled under it);
- ``N+1``    a MARKER ``take:update:{name}`` holding ``update_id`` and the payload (its output
  names the request's event id), written with the consumption of the request from the inbox
  (one transaction: a request is taken once);
- ``N+2..``  the handler's own steps and effects, if any;
- ``N+k``    the reply's publication (``publish:update:{update_id}``), committed at once.

A replay of the wait at ``N`` -- open or closed -- first replays every take marker the journal
holds right after its position (and so the handler, the same code on the same payload), and
only then answers the wait; the code after the wait takes its positions after them, exactly as
it did live. What the journal holds decides, never the timing of arrivals.

Rules: an update that arrives while the workflow runs steps stays in the inbox until its next
wait; a handler that raises publishes the failure as its reply (the caller gets
:class:`~ledgerflow.errors.UpdateRejectedError`) and the workflow goes on; handlers do not run
while parallel branches are live, nor inside another handler, and a handler may not wait
itself (the instance parks ``update_handler_waits``: a wait under a wait would hold the outer
one's timer). Updates with no declared handler are left for ``handle_updates``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol

from ledgerflow import limits
from ledgerflow.errors import RegistrationError, StepFailedError
from ledgerflow.ledger.records import ConsumeDelivery, StepRecord, Write
from ledgerflow.ledger.values import TAKE_PREFIX, reply_name, update_event_id
from ledgerflow.model.ids import StepSeq
from ledgerflow.model.signal import UPDATE_PREFIX
from ledgerflow.model.step import StepKind
from ledgerflow.runtime import faults, values
from ledgerflow.runtime.branches import Branches
from ledgerflow.runtime.control import Diverged, Park

UPDATE_HANDLER_WAITS = "update_handler_waits"


class HandlingContext(values.PublisherContext, Protocol):
    """What running handlers takes of the workflow context (see values.PublisherContext)."""

    _branches: Branches
    _updates: UpdateHandlers


class UpdateHandlers:
    """The update handlers one run declared, and their running at its waits."""

    def __init__(self, ctx: HandlingContext) -> None:
        self._ctx = ctx
        self._handlers: dict[str, Callable[[Any], Any]] = {}
        # Set while a handler runs: no wait inside it, no handler under it.
        self.running = False

    def declare(self, name: str, handler: Callable[[Any], Any]) -> None:
        """Declare (or replace) the handler of update requests ``name``."""
        if not callable(handler):
            raise RegistrationError(f"the handler of update {name!r} is not callable")
        self._handlers[values.value_name(name)] = handler

    def declares(self, name: str) -> bool:
        return name in self._handlers

    def refuse_wait(self, what: str) -> None:
        """A wait asked for inside a handler: the instance parks (see the module)."""
        if self.running:
            raise Park(
                UPDATE_HANDLER_WAITS,
                f"{what} was called inside an update handler: a handler runs steps and "
                "effects, never waits (it runs under a wait of the workflow)",
            )

    async def replayed(self, seq: StepSeq) -> None:
        """Replay the updates the journal holds as taken under the wait at ``seq``."""
        s = self._ctx._session
        while True:
            recorded = s.step(StepSeq(self._ctx.steps_taken + 1))
            if recorded is None or not _is_take(recorded):
                return
            spec = s.codec.decode(recorded.input or "{}")
            name = recorded.name[len(TAKE_PREFIX) + len(UPDATE_PREFIX) :]
            await self._handle(seq, name, str(spec["update_id"]), spec["payload"])

    async def taken(self, seq: StepSeq, pending: list[Write]) -> list[Write]:
        """Handle the requests waiting in the inbox for a declared handler (oldest first, at
        most ``limits.UPDATES_HANDLED_MAX``), under the wait at ``seq``; return the writes
        still to commit (``pending``, or none once committed here)."""
        s = self._ctx._session
        if not self._handlers or self.running or s.branches_live() or s.cancel_requested:
            return pending
        found = [
            (delivery, name)
            for name in sorted(self._handlers)
            for delivery in await s.store.pending_deliveries(s.instance_id, UPDATE_PREFIX + name)
        ]
        found.sort(key=lambda pair: (pair[0].received_at, pair[0].event_id))
        if not found:
            return pending
        if pending:
            # The wait's start is durable before any position after it.
            await s.commit(*pending)
        for delivery, name in found[: limits.UPDATES_HANDLED_MAX]:
            update_id = delivery.event_id[len(UPDATE_PREFIX) :]
            await self._handle(seq, name, update_id, s.codec.decode(delivery.payload))
        return []

    async def _handle(self, under: StepSeq, name: str, update_id: str, payload: Any) -> None:
        ctx, s = self._ctx, self._ctx._session
        take_name = TAKE_PREFIX + UPDATE_PREFIX + name
        text = s.codec.encode({"update_id": update_id, "payload": payload})

        def check() -> tuple[StepSeq, StepRecord | None]:
            seq = ctx._next_seq()
            return seq, ctx._replayed(seq, kind=StepKind.MARKER, name=take_name, input_text=text)

        seq, recorded = ctx._checked(f"update {name!r}", check)
        handler = self._handlers.get(name)
        if handler is None:
            asks = "no handler for it"
            raise Diverged(
                seq,
                holds=f"update {name!r} taken",
                asks=asks,
                reason=f"step {seq}: the journal holds update {name!r} taken under step "
                f"{under}, the code now declares {asks}",
            )
        if recorded is None:
            # What it took, as a wait's output names its event (the oracle reads it).
            taken = s.codec.encode({"event_id": update_event_id(update_id)})
            s.ride_marker(seq, take_name, input=text, output=taken)
            s.riders.append(ConsumeDelivery(event_id=update_event_id(update_id), seq=seq))
        reply = await self._answer(under, handler, payload)
        if faults.plan is not None:
            faults.point("update.before_reply", instance=s.instance.business_key, seq=seq)
        values.publish(ctx, reply_name(update_id), reply, reply=True)
        if s.riders:
            await s.commit()

    async def _answer(
        self, under: StepSeq, handler: Callable[[Any], Any], payload: Any
    ) -> dict[str, Any]:
        """The handler's reply, or its failure as the reply (the workflow goes on)."""
        self.running = True
        try:
            with self._ctx._branches.aside(int(under)):
                answer = handler(payload)
                if inspect.isawaitable(answer):
                    answer = await answer
            return {"reply": answer}
        except StepFailedError as failed:
            if failed.seq is None:
                return {"error": f"StepFailedError: {failed}"}
            return {"error": values.failure_of(self._ctx._session, StepSeq(failed.seq))}
        except Exception as failed:  # noqa: BLE001 - the handler's failure is its reply.
            return {"error": f"{type(failed).__name__}: {failed}"}
        finally:
            self.running = False


class PublishingCalls:
    """The values and updates part of :class:`~ledgerflow.runtime.context.WorkflowContext`."""

    def publish(self: HandlingContext, name: str, value: Any) -> None:
        """Publish ``value`` under ``name`` for readers (``engine.read``, ``wait_published``):
        journaled here, visible once the run's next commit (this step's boundary) is durable,
        each time one version more; kept across continue-as-new and after the end."""
        values.publish(self, name, value)

    async def handle_updates(
        self: HandlingContext,
        name: str,
        handler: Callable[..., Any],
        *,
        timeout: float | None = None,
    ) -> int:
        """Handle update requests ``name`` (``engine.update``): wait up to ``timeout`` for
        one, answer it and every other one there with ``handler(payload)`` (a step), publish
        each reply; return how many were handled. See :mod:`ledgerflow.runtime.values`."""
        if self._updates.declares(name):
            raise RegistrationError(f"update {name!r} has a declared handler (ctx.on_update)")
        return await values.handle_updates(self, name, handler, timeout=timeout)

    def on_update(self: HandlingContext, name: str, handler: Callable[[Any], Any]) -> None:
        """Declare ``handler(payload)`` the answer to update requests ``name``: from here on
        it runs at every wait of the workflow (a timer, an event, an approval, a lock) and the
        wait goes on waiting; its return value is the reply. The handler is workflow code,
        sync or async: it may run steps and effects, and change the workflow's variables, but
        not wait. See :mod:`ledgerflow.runtime.update_handlers`.

        Example::

            ctx.on_update("add", lambda amount: totals.append(amount) or sum(totals))
            await ctx.wait_for("close")  # "add" requests are answered meanwhile
        """
        self._updates.declare(name, handler)


def _is_take(recorded: StepRecord) -> bool:
    return recorded.kind is StepKind.MARKER and recorded.name.startswith(
        TAKE_PREFIX + UPDATE_PREFIX
    )


def take_follows(journal_step: Callable[[StepSeq], StepRecord | None], seq: StepSeq) -> bool:
    """Whether the journal holds an update taken right after position ``seq`` (the replay
    checker's test for a wait still open with handled updates under it)."""
    recorded = journal_step(StepSeq(seq + 1))
    return recorded is not None and _is_take(recorded)
