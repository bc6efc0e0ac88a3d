"""A workflow sends to another instance: a signal, or a detached start (internal).

``ctx.signal_instance`` and ``ctx.start_workflow`` each take one journal position (a SEND
step) whose write is committed in the same transaction as what it sends -- the event in the
target's inbox, or the new instance -- through :meth:`Session.commit` (``beside``). The send
has its own identity: the event id is derived from the sender's instance, run and position
(``send:{instance}/r{run}/s{seq}``), so the target's inbox would keep it once even if it were
ever written twice; it is not, since the step and the send commit together or not at all. No
effect round trip is needed: both instances live in one journal.

A replay returns the recorded answer and sends nothing. A send the store refuses (no such
target; a start whose key names another instance, or a retired version) is recorded as the
step's failure, in its own commit, and raised into the workflow as the same typed error on
every replay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ledgerflow.errors import (
    InboxFullError,
    InstanceNotFoundError,
    KeyInUseError,
    LedgerflowError,
    RegistrationError,
    TargetNotFoundError,
    VersionRetiredError,
)
from ledgerflow.ledger.records import (
    NewInstance,
    NoCancelRequest,
    StartInstance,
    StepRecord,
    StepWrite,
)
from ledgerflow.ledger.transaction import Deliver, FromOutside, OutsideWrite
from ledgerflow.ledger.transitions import new_step
from ledgerflow.model import names
from ledgerflow.model.definition import Registry
from ledgerflow.model.ids import InstanceId, StepSeq
from ledgerflow.model.retry import DEFAULT_STEP_RETRY
from ledgerflow.model.signal import signal_name
from ledgerflow.model.start_policy import policies, start_time
from ledgerflow.model.step import StepEvent, StepKind, StepStatus
from ledgerflow.runtime import faults
from ledgerflow.runtime.branches import Branches
from ledgerflow.runtime.core import instance_id_for
from ledgerflow.runtime.session import BESIDE_REFUSALS, Session

T = TypeVar("T")


class SenderContext(Protocol):
    """What a send takes of the sender's
    :class:`~ledgerflow.runtime.context.WorkflowContext` (declared here so that the context
    may call this module without the two importing each other)."""

    _session: Session
    _registry: Registry | None
    _branches: Branches

    def _next_seq(self) -> StepSeq: ...

    def _checked(self, what: str, check: Callable[[], T]) -> T: ...

    def _replayed(
        self, seq: StepSeq, *, kind: StepKind, name: str, input_text: str | None
    ) -> StepRecord | None: ...

    def _stop_if_cancelled(self, seq: StepSeq, name: str, recorded: StepRecord | None) -> None: ...


# The refusals a send records as its step's failure (any other refusal is the store's or the
# engine's trouble: the worker abandons the instance to recovery, which sends again).
SEND_REFUSALS = BESIDE_REFUSALS


def signal_name_of(name: str) -> str:
    """A signal's name, checked as any face checks it (``complete:`` is reserved)."""
    return signal_name(names.event_text(name, what="signal name"))


def target_of(session: Session, target: str | tuple[str, str]) -> InstanceId:
    """The instance a send names: by its id, or by (workflow, business key) in the sender's
    tenant (the id the start of that key derives)."""
    if isinstance(target, tuple):
        workflow, key = target
        return instance_id_for(session.instance.tenant, workflow, names.business_key(key))
    return InstanceId(names.event_text(target, what="instance id"))


def new_instance(
    session: Session,
    seq: StepSeq,
    registry: Registry | None,
    workflow: str,
    input: Any,
    *,
    key: str | None,
    version: int | None,
    start_in: float | None,
    if_running: str,
    if_ended: str,
) -> NewInstance:
    """The instance a detached start makes, pinned to the newest definition (or ``version``)
    of the sender's registry; its key by default derived from the sender's position."""
    if registry is None:
        raise RegistrationError("this context has no registry: it starts no workflow")
    definition = registry.get(workflow, version)
    tenant = session.instance.tenant
    business_key = names.business_key(
        key if key is not None else f"{session.instance_id}/r{session.instance.run}/s{seq}"
    )
    running, ended = policies(if_running, if_ended)
    now = session.clock.now()
    return NewInstance(
        instance_id=instance_id_for(tenant, definition.name, business_key),
        tenant=tenant,
        workflow_name=definition.name,
        workflow_version=definition.version,
        fingerprint=definition.fingerprint,
        business_key=business_key,
        input=session.codec.encode(input),
        available_at=start_time(start_at=None, start_in=start_in, now=now),
        if_running=running,
        if_ended=ended,
    )


def send_event_id(session: Session, seq: StepSeq) -> str:
    """The identity of the event a send delivers: the sender's instance, run and position."""
    return f"send:{session.instance_id}/r{session.instance.run}/s{seq}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """One send at one position: what it writes beside its step, and its answer."""

    session: Session
    seq: StepSeq
    name: str
    input_text: str

    def replayed(self, recorded: StepRecord) -> Any:
        """The recorded answer, or the recorded refusal raised again; nothing is sent."""
        codec = self.session.codec
        if recorded.status is StepStatus.COMPLETED:
            return codec.decode(recorded.output or "null")
        raise refusal_of(codec.decode(recorded.error or "null"), self.session, self.seq)

    async def commit(
        self, write: OutsideWrite, *, answer: Any, fences: tuple[FromOutside, ...] = ()
    ) -> Any:
        """The step and what it sends in one transaction; a refusal recorded as the step's
        failure and raised."""
        session = self.session
        step = self._step(StepEvent.COMPLETE, output=session.codec.encode(answer))
        if faults.plan is not None:
            faults.point("send.before_commit", instance=session.instance.business_key, seq=self.seq)
        try:
            # Held to there being no cancel request, as a new effect, wait or timer is: once a
            # cancel returns, the instance sends nothing new.
            await session.commit(step, NoCancelRequest(), beside=(write,), fences=fences)
        except SEND_REFUSALS as refused:
            recorded = _recorded(refused, write)
            await session.commit(self._step(StepEvent.FAIL, error=session.codec.encode(recorded)))
            raise refusal_of(recorded, session, self.seq) from None
        if faults.plan is not None:
            faults.point("send.after_commit", instance=session.instance.business_key, seq=self.seq)
        return answer

    def _step(
        self, event: StepEvent, *, output: str | None = None, error: str | None = None
    ) -> StepWrite:
        s = self.session
        return new_step(
            s.instance,
            self.seq,
            event,
            kind=StepKind.SEND,
            name=self.name,
            input=self.input_text,
            retry_policy=s.codec.encode(DEFAULT_STEP_RETRY.to_record()),
            now=s.clock.now(),
            output=output,
            error=error,
        )


def deliver_to(
    session: Session, seq: StepSeq, target: InstanceId, name: str, payload: str
) -> Deliver:
    return Deliver(
        instance_id=target,
        event_id=send_event_id(session, seq),
        name=name,
        payload=payload,
        sender=f"instance:{session.instance_id}",
    )


def _recorded(refused: LedgerflowError, write: OutsideWrite) -> dict[str, Any]:
    """A refusal as the journal keeps it: its kind, its text and its identities."""
    target = write.instance_id if isinstance(write, Deliver) else None
    kind = (
        "target_not_found" if isinstance(refused, InstanceNotFoundError) else type(refused).__name__
    )
    return {"kind": kind, "message": refused.message, "ids": refused.ids, "target": target}


def refusal_of(recorded: Any, session: Session, seq: StepSeq) -> LedgerflowError:
    """The typed error of a recorded refusal (the same on every replay)."""
    spec = recorded if isinstance(recorded, dict) else {}
    kind, message, ids = spec.get("kind"), str(spec.get("message", "")), spec.get("ids") or {}
    if kind == "KeyInUseError":
        return KeyInUseError(
            message,
            instance_id=ids.get("instance_id"),
            key=ids.get("key"),
            status=ids.get("status"),
            run=ids.get("run"),
        )
    if kind == "VersionRetiredError":
        return VersionRetiredError(
            message, workflow=ids.get("workflow"), version=ids.get("version")
        )
    if kind == "InboxFullError":
        return InboxFullError(
            message, instance_id=ids.get("instance_id"), event_id=ids.get("event_id")
        )
    target = spec.get("target")
    return TargetNotFoundError(
        f"no instance {target} to send the signal to",
        instance_id=session.instance_id,
        seq=seq,
        target=target,
    )


async def signal_instance(
    ctx: SenderContext, target: str | tuple[str, str], name: str, payload: Any
) -> str:
    """``ctx.signal_instance``: the send's position, then (in position order among branches)
    its answer from the journal or the step and the event committed together."""
    session = ctx._session
    name = signal_name_of(name)
    to = target_of(session, target)
    spec = {"target": to, "signal": name, "payload": payload}
    send, recorded = _position(ctx, f"signal:{name}", spec)

    async def work() -> str:
        if recorded is not None:
            return str(send.replayed(recorded))
        event = deliver_to(session, send.seq, to, name, session.codec.encode(payload))
        fences = (FromOutside(instance_id=to, tenant=session.instance.tenant),)
        return str(await send.commit(event, answer=event.event_id, fences=fences))

    answer: str = await ctx._branches.call(send.seq, work())
    return answer


async def start_workflow(
    ctx: SenderContext,
    workflow: str,
    input: Any,
    *,
    key: str | None,
    version: int | None,
    start_in: float | None,
    if_running: str,
    if_ended: str,
) -> InstanceId:
    """``ctx.start_workflow``: as :func:`signal_instance`, with the new instance beside."""
    session = ctx._session
    spec = {
        "workflow": workflow, "input": input, "key": key, "version": version,
        "start_in": start_in, "if_running": if_running, "if_ended": if_ended,
    }  # fmt: skip
    send, recorded = _position(ctx, f"start:{workflow}", spec)

    async def work() -> str:
        if recorded is not None:
            return str(send.replayed(recorded))
        new = new_instance(
            session, send.seq, ctx._registry, workflow, input, key=key, version=version,
            start_in=start_in, if_running=if_running, if_ended=if_ended,
        )  # fmt: skip
        return str(await send.commit(StartInstance(new=new), answer=new.instance_id))

    return InstanceId(await ctx._branches.call(send.seq, work()))


def _position(
    ctx: SenderContext, name: str, spec: dict[str, Any]
) -> tuple[Send, StepRecord | None]:
    """The send's position (taken in call order, as a step's: runtime/branches.py) and what
    the journal holds there. Everything that may fail after the position is taken runs inside
    the branch's call, so a refusal is handed back in position order too."""
    session = ctx._session
    input_text = session.codec.encode(spec)

    def check() -> tuple[StepSeq, StepRecord | None]:
        seq = ctx._next_seq()
        recorded = ctx._replayed(seq, kind=StepKind.SEND, name=name, input_text=input_text)
        ctx._stop_if_cancelled(seq, name, recorded)
        return seq, recorded

    seq, recorded = ctx._checked(name, check)
    ctx._branches.take(seq)
    return Send(session=session, seq=seq, name=name, input_text=input_text), recorded
