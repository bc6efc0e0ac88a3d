"""Values a workflow publishes, and the updates it answers (internal).

Workflow side (the bodies of ``ctx.publish`` and ``ctx.handle_updates``):

- ``ctx.publish(name, value)`` takes one journal position (a MARKER step ``publish:{name}``
  whose input is the value) and rides with the next commit of the run -- its step boundary --
  with a :class:`~ledgerflow.ledger.values.PublishValue` write: the value row and the step are
  one transaction, so nobody sees a value before the journal holds it (a crash before that
  commit shows nothing; the replay publishes it then, once). A replay finds the step and
  writes nothing; a replay that would publish another value there is a divergence and parks
  the instance, the recorded value intact.
- ``ctx.handle_updates(name, handler)`` waits (a journaled wait, as ``wait_for``) for update
  requests ``name``, runs ``handler`` on each as a journaled step and publishes its reply
  under ``update:{update_id}``. The wait takes requests that arrived before it opened.

Caller side (the bodies of ``Engine.read``, ``wait_published``, ``update`` and
``update_with_start``): reads of the store only -- no worker and no workflow code is needed
to answer them, also after the instance ended. An update's request is an inbox event whose
id is derived from ``update_id``: the inbox keeps an id once across every run, so a repeated
``update_id`` (after a continue-as-new too) stores nothing and gets the first reply. A
waiting caller reads again when the engine's own worker commits the value it waits for
(:mod:`~ledgerflow.runtime.doorbell`), else every ``limits.VALUE_POLL_SECONDS``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, Unpack

from ledgerflow import limits
from ledgerflow.errors import (
    InstanceNotFoundError,
    PayloadError,
    ResultTimeoutError,
    StepFailedError,
    UnknownWorkflowError,
    UpdateRejectedError,
    WaitTimeoutError,
)
from ledgerflow.ledger.delivery import DeliveryState
from ledgerflow.ledger.records import InstanceRecord, NewInstance, StartInstance, StepRecord
from ledgerflow.ledger.transaction import Deliver, Transaction
from ledgerflow.ledger.transaction import Delivered as Kept
from ledgerflow.ledger.transaction import Started as StartAnswer
from ledgerflow.ledger.values import (
    PUBLISH_PREFIX,
    NotPublished,
    Published,
    PublishValue,
    reply_name,
    update_event_id,
)
from ledgerflow.model import names
from ledgerflow.model.definition import Registry, WorkflowFunction
from ledgerflow.model.ids import InstanceId, StepSeq
from ledgerflow.model.instance import FINAL_STATUSES
from ledgerflow.model.signal import UPDATE_PREFIX, Signal
from ledgerflow.model.step import StepKind
from ledgerflow.runtime.core import Delivered, DeliveryOutcome, EngineCore, Started, StartOptions
from ledgerflow.runtime.debounce import refuse_debounce
from ledgerflow.runtime.doorbell import rung_or_timeout
from ledgerflow.runtime.seams import Runtime
from ledgerflow.runtime.session import Session
from ledgerflow.storage.store import LedgerReads

T = TypeVar("T")


def value_name(name: object) -> str:
    """A published value's name, checked (``update:`` is the replies')."""
    return names.checked(name, what="value name", length_max=limits.VALUE_NAME_LENGTH_MAX)


# -- workflow side --------------------------------------------------------------------------


class PublisherContext(Protocol):
    """What publishing and handling updates take of the
    :class:`~ledgerflow.runtime.context.WorkflowContext` (declared here so that the context
    may call this module without the two importing each other)."""

    _session: Session

    def _next_seq(self) -> StepSeq: ...

    def _checked(self, what: str, check: Callable[[], T]) -> T: ...

    def _replayed(
        self, seq: StepSeq, *, kind: StepKind, name: str, input_text: str | None
    ) -> StepRecord | None: ...

    async def wait_for(self, event: str, *, timeout: float | None = None) -> Signal: ...

    async def step(self, name: str, function: Callable[..., Any], *args: Any) -> Any: ...

    @property
    def steps_taken(self) -> int: ...


def publish(ctx: PublisherContext, name: str, value: Any, *, reply: bool = False) -> None:
    """Journal the publication of ``value`` under ``name`` at the next position; the value is
    written with the run's next commit (see module)."""
    s = ctx._session
    name = name if reply else value_name(name)
    if not reply and name.startswith(UPDATE_PREFIX):
        raise PayloadError(f"value names starting with {UPDATE_PREFIX!r} are updates' replies")
    text = s.codec.encode(value)
    step_name = PUBLISH_PREFIX + name

    def check() -> tuple[StepSeq, StepRecord | None]:
        seq = ctx._next_seq()
        return seq, ctx._replayed(seq, kind=StepKind.MARKER, name=step_name, input_text=text)

    seq, recorded = ctx._checked(f"publish({name!r})", check)
    if recorded is not None:
        return
    s.ride_marker(seq, step_name, input=text, output="null")
    s.riders.append(PublishValue(name=name, value=text, run=s.instance.run, seq=seq))


def failure_of(session: Session, seq: StepSeq) -> str:
    """What a failed handler's reply says, from its step's journaled error: the same text live
    and on every replay (the exception's own message differs between the two)."""
    recorded = session.step(seq)
    error = session.codec.decode(recorded.error or "null") if recorded is not None else None
    if isinstance(error, dict):
        return f"{error.get('type', 'Error')}: {error.get('message', '')}"
    return str(error)


async def handle_updates(
    ctx: PublisherContext,
    name: str,
    handler: Callable[..., Any],
    *,
    timeout: float | None,
) -> int:
    """Wait up to ``timeout`` for an update ``name``, then handle it and every other one
    already there (at most ``limits.UPDATES_HANDLED_MAX``); return how many were handled.

    Each request is taken by a journaled wait, answered by ``handler(payload)`` as a step,
    and its reply published under ``update:{update_id}`` (a handler that fails publishes the
    failure, which ``engine.update`` raises as :class:`~ledgerflow.errors.UpdateRejectedError`).
    """
    event = UPDATE_PREFIX + value_name(name)
    handled, wait = 0, timeout
    while handled < limits.UPDATES_HANDLED_MAX:
        try:
            signal = await ctx.wait_for(event, timeout=wait)
        except WaitTimeoutError:
            return handled
        update_id = (signal.event_id or "")[len(UPDATE_PREFIX) :]
        try:
            reply: dict[str, Any] = {"reply": await ctx.step(event, handler, signal.payload)}
        except StepFailedError:
            reply = {"error": failure_of(ctx._session, StepSeq(ctx.steps_taken))}
        publish(ctx, reply_name(update_id), reply, reply=True)
        handled, wait = handled + 1, 0.0
    return handled


# -- caller side ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateStarted:
    """What :meth:`Engine.update_with_start` returns: the start's answer and the reply."""

    started: Started
    reply: Any

    @property
    def instance_id(self) -> InstanceId:
        """The id of the instance started (or found again under its business key)."""
        return self.started.instance_id


def read_value(core: EngineCore, instance_id: str, name: str) -> Published | NotPublished:
    """The value last published under ``name`` by the instance, from the store alone."""
    record = core.get(instance_id)
    found = core.store.published(record.instance_id, name)
    return found if found is not None else NotPublished(instance_id=record.instance_id, name=name)


def request_update(
    core: EngineCore,
    record: InstanceRecord,
    name: str,
    payload: Any,
    *,
    update_id: str,
    now: float,
) -> Delivered:
    """Keep the update request in the instance's inbox, after its validator (if declared)
    accepted it; an ``update_id`` the inbox holds already writes nothing and is answered
    DUPLICATE (its first reply is the answer). Raises UpdateRejectedError when the validator
    refuses, and when the instance has ended (the request is then kept, refused)."""
    name = value_name(name)
    update_id = names.event_text(update_id, what="update id")
    event_id = update_event_id(update_id)
    first = core.store.delivery(record.instance_id, event_id)
    if first is not None:
        return Delivered(delivery=first, outcome=DeliveryOutcome.DUPLICATE)
    validate(core.registry, record.workflow_name, name, payload, record.instance_id, update_id)
    kept = core.store.deliver(
        request_of(core, record.instance_id, name, payload, update_id), now=now
    )
    if kept is None:
        raise InstanceNotFoundError(instance_id=record.instance_id)
    refuse_if_ended(kept, update_id)
    outcome = DeliveryOutcome.ACCEPTED if kept.new else DeliveryOutcome.DUPLICATE
    return Delivered(delivery=kept.delivery, outcome=outcome)


def request_of(
    core: EngineCore, instance_id: InstanceId, name: str, payload: Any, update_id: str
) -> Deliver:
    """The inbox write of an update request."""
    return Deliver(
        instance_id=instance_id,
        event_id=update_event_id(update_id),
        name=UPDATE_PREFIX + name,
        payload=core.codec.encode(payload),
        sender=None,
    )


def validate(
    registry: Registry,
    workflow: str,
    name: str,
    payload: Any,
    instance_id: InstanceId,
    update_id: str,
) -> None:
    """Run the update's declared validator; its refusal is UpdateRejectedError."""
    try:
        registry.get(workflow)
    except UnknownWorkflowError:
        # Never skip a validator silently: without the workflow's code none can run.
        raise UpdateRejectedError(
            f"update {name!r} refused: this process's registry does not hold workflow "
            f"{workflow!r}, so its update validators cannot run (give it the registry)",
            instance_id=instance_id,
            update_id=update_id,
        ) from None
    validator = registry.validator_of(workflow, name)
    if validator is None:
        return
    try:
        validator(payload)
    except Exception as refusal:
        raise UpdateRejectedError(
            f"update {name!r} refused by its validator: {refusal}",
            instance_id=instance_id,
            update_id=update_id,
        ) from refusal


def refuse_if_ended(kept: Kept, update_id: str) -> None:
    if kept.delivery.state is DeliveryState.REJECTED:
        raise UpdateRejectedError(
            f"update {update_id!r} came after the instance ended: nothing handles it",
            instance_id=kept.delivery.instance_id,
            update_id=update_id,
        )


def reply_of(store: LedgerReads, instance_id: InstanceId, update_id: str) -> Any:
    """The reply to an update once published (:data:`NO_REPLY_YET` before); UpdateRejectedError
    when its handler failed, or the instance ended without taking the request or without
    answering it."""
    found = store.published(instance_id, reply_name(update_id))
    if found is None:
        request = store.delivery(instance_id, update_event_id(update_id))
        if request is not None and request.state is DeliveryState.REJECTED:
            raise UpdateRejectedError(
                f"update {update_id!r} was not handled: the instance ended first",
                instance_id=instance_id,
                update_id=update_id,
            )
        if request is not None and request.state is DeliveryState.CONSUMED:
            # Taken, and its handler stopped by a cancel (or another final ending) before
            # its reply: nothing will answer it now.
            instance = store.get_instance(instance_id)
            if instance is not None and instance.status in FINAL_STATUSES:
                raise UpdateRejectedError(
                    f"update {update_id!r} was taken but not answered: the instance ended "
                    f"{instance.status.value} while its handler ran",
                    instance_id=instance_id,
                    update_id=update_id,
                )
        return NO_REPLY_YET
    answer = found.value
    if isinstance(answer, dict) and "error" in answer:
        raise UpdateRejectedError(
            f"update {update_id!r} failed in its handler: {answer['error']}",
            instance_id=instance_id,
            update_id=update_id,
        )
    return answer["reply"] if isinstance(answer, dict) else answer


# What reply_of answers before the reply is published (a reply may be None).
NO_REPLY_YET: Any = object()


def reply_timed_out(instance_id: str, update_id: str, timeout: float) -> ResultTimeoutError:
    return ResultTimeoutError(
        f"no reply to update {update_id!r} within {timeout}s", instance_id=instance_id
    )


class Wakeable(Protocol):
    """A worker of the engine, as far as an update needs it (no import of the worker, which
    runs workflow code, whose context calls this module)."""

    def wake(self) -> None: ...


class ValueCalls:
    """The published values and updates part of :class:`~ledgerflow.runtime.engine.Engine`."""

    registry: Registry
    runtime: Runtime
    _core: EngineCore
    _workers: Sequence[Wakeable]

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self.runtime.store.call(method, *args, **kwargs)

    def _wake(self) -> None:
        for worker in self._workers:
            worker.wake()

    async def read(self, instance_id: str, name: str) -> Published | NotPublished:
        """The value the instance last published under ``name`` (``ctx.publish``), read from
        the store alone: :class:`Published` (value, version, run, position, time) or
        :class:`NotPublished`. No worker is needed, and the instance may have ended.

        Example::

            progress = await engine.read(order_id, "progress")
            if isinstance(progress, Published):
                print(progress.value, progress.version)
        """
        found: Published | NotPublished = await self._call(
            read_value, self._core, instance_id, name
        )
        return found

    async def wait_published(
        self, instance_id: str, name: str, *, after_version: int = 0, timeout: float = 60.0
    ) -> Published:
        """Wait until ``name`` has a version newer than ``after_version`` and return it;
        :class:`~ledgerflow.errors.ResultTimeoutError` when ``timeout`` seconds pass first
        (never ``None``: "not yet" and a value of ``None`` do not look alike)."""
        deadline = time.monotonic() + timeout
        record: InstanceRecord = await self._call(self._core.get, instance_id)
        with self.runtime.doorbell.listening(record.instance_id, name) as rung:
            while True:
                rung.clear()
                found = await self.read(instance_id, name)
                if isinstance(found, Published) and found.version > after_version:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ResultTimeoutError(
                        f"no version of {name!r} after {after_version} within {timeout}s",
                        instance_id=instance_id,
                    )
                await rung_or_timeout(rung, min(limits.VALUE_POLL_SECONDS, left))

    async def update(
        self,
        instance_id: str,
        name: str,
        payload: Any = None,
        *,
        update_id: str,
        timeout: float = 60.0,
    ) -> Any:
        """Ask the instance to handle the update ``name`` with ``payload`` and return the
        reply its handler published (``ctx.handle_updates``).

        The workflow's validator, if it declared one (``registry.update_validator``), runs
        first: refusing raises :class:`~ledgerflow.errors.UpdateRejectedError` and writes
        nothing. The request is then kept in the instance's inbox for its next
        ``handle_updates``; an ``update_id`` sent before (in any run of the instance) stores
        nothing and returns the first reply.

        Example::

            total = await engine.update(counter_id, "add", 5, update_id="req-17")
        """
        record: InstanceRecord = await self._call(self._core.get, instance_id)
        delivered: Delivered = await self._call(
            request_update, self._core, record, name, payload, update_id=update_id,
            now=time.time(),
        )  # fmt: skip
        if delivered.outcome is DeliveryOutcome.ACCEPTED:
            self._wake()
        return await self._reply(record.instance_id, update_id, timeout)

    async def update_with_start(
        self,
        workflow: str | WorkflowFunction,
        *,
        update: str,
        update_id: str,
        payload: Any = None,
        timeout: float = 60.0,
        **options: Unpack[StartOptions],
    ) -> UpdateStarted:
        """Start (or find, as :meth:`start` would) the instance of a business key and store
        the update request for it, in one transaction; then wait for the reply as
        :meth:`update` does. The validator runs before anything is written."""
        name = value_name(update)
        update_id = names.event_text(update_id, what="update id")
        definition, new = self._core.prepare(workflow, now=time.time(), **options)
        refuse_debounce(new, "update_with_start")
        validate(self.registry, definition.name, name, payload, new.instance_id, update_id)
        request = request_of(self._core, new.instance_id, name, payload, update_id)
        started: Started = await self._call(self._start_with, new, request)
        self._wake()
        reply = await self._reply(new.instance_id, update_id, timeout)
        return UpdateStarted(started=started, reply=reply)

    def _start_with(self, new: NewInstance, request: Deliver) -> Started:
        writes = (StartInstance(new=new), request)
        start, kept = self._core.store.apply(Transaction(writes=writes), now=time.time())
        assert isinstance(start, StartAnswer)
        assert isinstance(kept, Kept)
        refuse_if_ended(kept, request.event_id[len(UPDATE_PREFIX) :])
        return self._core.started(new, start.instance, created=start.new)

    async def _reply(self, instance_id: InstanceId, update_id: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        with self.runtime.doorbell.listening(instance_id, reply_name(update_id)) as rung:
            while True:
                rung.clear()
                answer = await self._call(reply_of, self._core.store, instance_id, update_id)
                if answer is not NO_REPLY_YET:
                    return answer
                left = deadline - time.monotonic()
                if left <= 0:
                    raise reply_timed_out(instance_id, update_id, timeout)
                await rung_or_timeout(rung, min(limits.VALUE_POLL_SECONDS, left))
