"""The replay checker: a recorded history run against the workflow code as it is now, with
nothing dispatched and nothing written (internal; public as ``ledgerflow.testing.replay_history``).

It is the executor's own replay (a :class:`~ledgerflow.runtime.context.WorkflowContext` over a
:class:`~ledgerflow.runtime.session.Session` holding the journal), with two differences:

- the journal is the only thing that answers. A position the journal holds settled (a step
  completed or failed, an effect confirmed, satisfied or failed, a wait closed) is answered from
  it exactly as a worker's resumption answers it; a position the journal holds unsettled, or
  does not hold, is the end of what the history can prove, and the check stops there: no
  driver that could call a participant or the store is ever built. The session's store refuses
  everything besides, so a bug here cannot dispatch either.
- strict at both ends. A history that ended by its code's own doing (not cancelled, not
  stopped by a person) is complete: code that asks for a position past its end was changed
  ("a step added after the last one"), and code that returns or raises before the journal's
  last position no longer reaches what the journal holds. A history still in flight may go on
  past its journal: that is the new code's to decide.

A mismatch at a position (another kind, name, input, participant or operation) is reported as
the journal holds it and as the code asked for it; so are added, removed, reordered, renamed
and re-parameterised steps and effects, each at the first position where they show.

Given the registry, an effect recorded under another participant contract version than its
declaration carries now (:func:`~ledgerflow.model.contracts.contract_mismatches`) is a
divergence too, of kind ``contract``, at the effect's position: the participant took a payload
of another shape than the code would build, so the history is not proven for this code unless
a migration plan maps the old contract's payload (``operators/upgrades.py``). The first
position wins: a step divergence before the effect is reported instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from ledgerflow.errors import UnknownVersionError, UnknownWorkflowError
from ledgerflow.ledger.records import (
    Commit,
    Delivery,
    InstanceRecord,
    Journal,
    StepRecord,
    TimelineEntry,
    Write,
)
from ledgerflow.ledger.transaction import Deliver, Delivered, Transaction
from ledgerflow.model.codec import Codec
from ledgerflow.model.contracts import ContractMismatch, contract_mismatches
from ledgerflow.model.definition import EffectDeclaration, Registry, WorkflowDefinition
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import InstanceId, StepSeq, WorkerId
from ledgerflow.model.instance import TERMINAL_STATUSES, InstanceStatus
from ledgerflow.model.step import StepKind, StepStatus
from ledgerflow.runtime.branches import deciding, leaves
from ledgerflow.runtime.clock import Clock, SystemClock
from ledgerflow.runtime.context import WorkflowContext, describe_step
from ledgerflow.runtime.control import (
    Abandon,
    Cancelled,
    ContinueAsNew,
    Diverged,
    Park,
    Suspend,
    Waiting,
)
from ledgerflow.runtime.session import Session
from ledgerflow.runtime.update_handlers import take_follows
from ledgerflow.runtime.waits import WaitDriver

REPLAY_OWNER = WorkerId("replay-check")

# Statuses an instance reaches only by someone's decision, never by its code's: its history
# stops wherever that decision found it.
_STOPPED_FROM_OUTSIDE = frozenset({InstanceStatus.MANUAL_INTERVENTION, InstanceStatus.CANCELLED})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReplayVerdict:
    """What replaying one history proved.

    ``compatible`` is True when the code asked for exactly what the journal holds, in order.
    Otherwise ``position`` is the first journal position where they part, ``holds`` what the
    journal holds there and ``asks`` what the code asked for (``None``: nothing), ``kind`` one
    of ``mismatch``, ``added``, ``missing``, ``contract`` (an effect recorded under another
    participant contract version than declared now) or ``refused`` and ``reason`` a sentence.
    ``replayed`` counts the positions the code was answered from the journal.
    ``reached_open`` lists the effect positions the journal holds unsettled (INTENDED,
    UNKNOWN, ...) at which the code asked for that very effect: the same participant,
    operation, step name and input, so the same idempotency key (an effect keeps the key it
    was minted with). Driven by this code, such an effect is settled by the effect protocol
    exactly as the code that sent it would settle it (lookup first; the same key).
    """

    instance_id: InstanceId
    workflow: str
    version: int
    fingerprint: str
    status: str
    compatible: bool
    replayed: int
    kind: str | None = None
    position: int | None = None
    holds: str | None = None
    asks: str | None = None
    reason: str | None = None
    reached_open: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The verdict as plain data."""
        return dataclasses.asdict(self)


class _Frontier(BaseException):
    """The code reached the end of what an in-flight history proves, at ``seq``: stop there,
    compatible."""

    def __init__(self, seq: int) -> None:
        super().__init__(seq)
        self.seq = seq


class _ReplayWriteError(AssertionError):
    """The checker's session was asked to write or read the store: a bug, never dispatched."""


class SealedStore:
    """The replay session's store: it answers nothing, so nothing is written or dispatched."""

    inline = True
    database_clock = False

    async def commit(self, commit: Commit | Transaction, *, now: float) -> Exception | None:
        raise _ReplayWriteError(f"a replay check tried to commit {commit!r}")

    async def pending_deliveries(self, instance_id: InstanceId, name: str) -> list[Delivery]:
        raise _ReplayWriteError("a replay check tried to read the inbox")

    async def deliver(self, write: Deliver, *, now: float) -> Delivered | None:
        raise _ReplayWriteError("a replay check tried to deliver an event")

    async def timeline(self, instance_id: InstanceId) -> list[TimelineEntry]:
        raise _ReplayWriteError("a replay check tried to read the timeline")


def _settled(session: Session, recorded: StepRecord) -> bool:
    """Whether the journal alone answers this position (no driver would call anyone)."""
    if recorded.kind is StepKind.EFFECT:
        effect = session.effect(recorded.seq)
        return effect is not None and effect.state in (
            EffectState.CONFIRMED,
            EffectState.SATISFIED,
            EffectState.FAILED,
        )
    if recorded.kind is StepKind.CHILD:
        return True  # its start is journaled; taking its ending is asked apart (result())
    if recorded.kind in (StepKind.LOCAL, StepKind.WAIT, StepKind.SEND, StepKind.LOCK):
        return recorded.status in (StepStatus.COMPLETED, StepStatus.FAILED)
    return recorded.status is StepStatus.COMPLETED


class ReplayContext(WorkflowContext):
    """A workflow context answered from the journal only (see the module's docstring)."""

    def __init__(self, session: Session, definition: WorkflowDefinition, *, complete: bool) -> None:
        super().__init__(session, definition)
        self.complete = complete
        # The participant and operation of the effect being checked (set by effect(), read by
        # the position check it makes before its first await), and the unsettled effect
        # positions the code reached asking for that very effect.
        self._asking: tuple[str, str] | None = None
        self.reached_open: list[int] = []

    async def effect(
        self, declaration: EffectDeclaration, payload: Any = None, *, name: str | None = None,
        priority: int | None = None,
    ) -> Any:  # fmt: skip
        self._asking = (declaration.participant.name, declaration.operation)
        return await super().effect(declaration, payload, name=name, priority=priority)

    def _replayed(
        self, seq: StepSeq, *, kind: StepKind, name: str, input_text: str | None
    ) -> StepRecord | None:
        recorded = super()._replayed(seq, kind=kind, name=name, input_text=input_text)
        asking, self._asking = self._asking, None
        if recorded is None:
            self._past_the_end(seq, describe_step(kind, name, input_text))
            return None
        effect = self._session.effect(seq) if kind is StepKind.EFFECT else None
        if (
            effect is not None
            and asking is not None
            and asking
            != (
                effect.participant,
                effect.operation,
            )
        ):
            # What a worker's effect driver refuses too: a step of that name, another effect.
            holds = (
                f"effect {effect.participant}.{effect.operation} under key {effect.idempotency_key}"
            )
            asks = f"effect {asking[0]}.{asking[1]} under the name {name!r}"
            raise Diverged(
                seq,
                holds=holds,
                asks=asks,
                reason=f"step {seq}: the journal holds {holds}, the code asks for {asks}",
            )
        if not _settled(self._session, recorded):
            if effect is not None:
                self.reached_open.append(int(seq))
            if take_follows(self._session.step, seq):
                # A wait still open with updates taken under it: they are replayed (proven),
                # and the history ends at the wait (see _UpdatesThenEnd).
                return recorded
            if self._recorded_after(seq) and not self._branches.tasks:
                # Only a migrated journal can hold this: what lies beyond would be reached
                # only after this position settles, and cannot be proven now.
                raise Park(
                    "replay_unprovable",
                    f"step {seq} is still open but the journal holds later positions",
                )
            raise _Frontier(seq)
        return recorded

    def _wait_driver(self, kind: StepKind, name: str, spec: dict[str, Any]) -> WaitDriver:
        driver = super()._wait_driver(kind, name, spec)
        if driver.recorded is not None and not _settled(self._session, driver.recorded):
            driver.updates = _UpdatesThenEnd(self, driver.seq)
        return driver

    def _recorded_after(self, seq: StepSeq) -> int | None:
        later = [s for s in self._session.journal.steps if s > seq]
        return min(later) if later else None

    def _past_the_end(self, seq: StepSeq, asks: str) -> None:
        later = self._recorded_after(seq)
        if later is not None and self._branches.tasks and not self.complete:
            # A branch's call not journaled yet while a sibling's later one is: the end of
            # what an in-flight gathered history proves.
            raise _Frontier(seq)
        if later is not None:
            raise Diverged(
                seq,
                holds=None,
                asks=asks,
                reason=f"step {seq}: the journal holds nothing here but holds step {later}, "
                f"the code asks for {asks}",
            )
        if not self.complete:
            raise _Frontier(seq)
        raise Diverged(
            seq,
            holds=None,
            asks=asks,
            reason=f"step {seq}: the history ended before this position, the code asks for {asks}",
        )

    def _child_unsettled(self, seq: StepSeq) -> None:
        # The journal proves the child's start, not its ending: the history ends here.
        raise _Frontier(seq)

    def _patch_at_frontier(self, seq: StepSeq, name: str) -> bool:
        # A complete history never reached this point with the patch: it took the old branch.
        if not self.complete:
            raise _Frontier(seq)
        return False


class _UpdatesThenEnd:
    """The updates a wait still open took: replayed from the journal like any position, then
    the end of what the history proves (the wait's own outcome is not in it yet)."""

    def __init__(self, ctx: ReplayContext, wait: StepSeq) -> None:
        self._ctx = ctx
        self._wait = wait

    async def replayed(self, seq: StepSeq) -> None:
        await self._ctx._updates.replayed(seq)
        later = self._ctx._recorded_after(StepSeq(self._ctx.steps_taken))
        if later is not None:
            raise Park(
                "replay_unprovable",
                f"step {seq} is still open but the journal holds step {later} after the "
                "updates taken under it",
            )
        raise _Frontier(self._wait)

    async def taken(self, seq: StepSeq, pending: list[Write]) -> list[Write]:
        raise _Frontier(self._wait)


def history_is_complete(instance: InstanceRecord) -> bool:
    """Whether the journal holds everything the code did: it ended by the code's own doing."""
    return (
        instance.status in TERMINAL_STATUSES
        and instance.status not in _STOPPED_FROM_OUTSIDE
        and instance.cancel_requested_at is None
    )


async def replay(
    definition: WorkflowDefinition,
    instance: InstanceRecord,
    journal: Journal,
    *,
    codec: Codec,
    clock: Clock | None = None,
    registry: Registry | None = None,
) -> ReplayVerdict:
    """Replay one instance's journal against ``definition``'s code; nothing is dispatched.

    With ``registry`` (the code's participants), recorded effects are also held to the
    contract versions it declares (see the module's docstring)."""
    verdict = await _replayed_code(definition, instance, journal, codec=codec, clock=clock)
    if registry is None:
        return verdict
    mismatches = contract_mismatches(journal.effects.values(), registry)
    if not mismatches:
        return verdict
    first = mismatches[0]
    if not verdict.compatible and verdict.position is not None and verdict.position < first.seq:
        return verdict
    return _contract_verdict(verdict, first)


def _contract_verdict(verdict: ReplayVerdict, mismatch: ContractMismatch) -> ReplayVerdict:
    def under(version: str | None) -> str:
        shown = "no contract version" if version is None else f"contract {version}"
        return f"effect {mismatch.participant}.{mismatch.operation} under {shown}"

    return dataclasses.replace(
        verdict,
        compatible=False,
        replayed=mismatch.seq - 1,
        kind="contract",
        position=mismatch.seq,
        holds=under(mismatch.recorded),
        asks=under(mismatch.declared),
        reason=mismatch.describe()
        + ": declare how the old contract's payload maps in a migration plan",
    )


async def _replayed_code(
    definition: WorkflowDefinition,
    instance: InstanceRecord,
    journal: Journal,
    *,
    codec: Codec,
    clock: Clock | None,
) -> ReplayVerdict:
    session = Session(
        instance=instance,
        owner=REPLAY_OWNER,
        journal=Journal(steps=dict(journal.steps), effects=dict(journal.effects)),
        store=SealedStore(),
        codec=codec,
        clock=clock or SystemClock(),
    )
    session.cancel_requested = False  # a replay asks, it never stops for a request
    complete = history_is_complete(instance)
    ctx = ReplayContext(session, definition, complete=complete)
    clean = ReplayVerdict(
        instance_id=instance.instance_id,
        workflow=instance.workflow_name,
        version=definition.version,
        fingerprint=definition.fingerprint,
        status=instance.status.value,
        compatible=True,
        replayed=0,
    )
    try:
        await _branches_ended(ctx, definition, codec.decode(instance.open_run_input))
    except _Frontier as frontier:
        reached = tuple(sorted(set(ctx.reached_open)))
        return dataclasses.replace(clean, replayed=frontier.seq - 1, reached_open=reached)
    except Diverged as diverged:
        return dataclasses.replace(
            clean,
            compatible=False,
            replayed=diverged.seq - 1,
            kind="added" if diverged.holds is None else "mismatch",
            position=diverged.seq,
            holds=diverged.holds,
            asks=diverged.asks,
            reason=diverged.reason,
        )
    except Park as park:
        return _refused(clean, ctx, f"{park.code}: {park.reason}")
    except (Suspend, Waiting, Cancelled, Abandon, _ReplayWriteError) as stopped:
        return _refused(clean, ctx, f"the code asked for more than the journal holds: {stopped}")
    except ContinueAsNew:
        pass  # The run ended by opening the next one, as a return ends it.
    except Exception:  # noqa: BLE001 - the code's own failure ends its run, as in a worker.
        pass
    return _ended(clean, ctx, session)


async def _branches_ended(ctx: ReplayContext, definition: WorkflowDefinition, value: Any) -> None:
    """The code run to its end, its branches too: when several stop, a divergence is
    reported before the end of what the journal proves, and that before the rest."""
    try:
        await definition.function(ctx, value)
    except BaseException as exc:
        with contextlib.suppress(BaseException):  # the code's own ending decides, below
            await ctx.close_branches()
        found = leaves(exc)
        for kind in (Diverged, _Frontier):
            stops = [leaf for leaf in found if isinstance(leaf, kind)]
            if stops:
                raise min(stops, key=lambda leaf: getattr(leaf, "seq", 0)) from None
        decided = deciding(exc, business=definition.is_business_failure)
        if decided is exc:
            raise
        raise decided from None
    await ctx.close_branches()


def _refused(clean: ReplayVerdict, ctx: WorkflowContext, reason: str) -> ReplayVerdict:
    return dataclasses.replace(
        clean,
        compatible=False,
        replayed=max(ctx.steps_taken - 1, 0),
        kind="refused",
        position=ctx.steps_taken,
        reason=reason,
    )


def _ended(clean: ReplayVerdict, ctx: WorkflowContext, session: Session) -> ReplayVerdict:
    """The code returned or raised: the journal must hold nothing past where it stopped."""
    beyond = sorted(seq for seq in session.journal.steps if seq > ctx.steps_taken)
    if not beyond:
        return dataclasses.replace(clean, replayed=ctx.steps_taken)
    first = session.journal.steps[beyond[0]]
    holds = describe_step(first.kind, first.name, first.input)
    return dataclasses.replace(
        clean,
        compatible=False,
        replayed=ctx.steps_taken,
        kind="missing",
        position=int(first.seq),
        holds=holds,
        reason=f"step {first.seq}: the journal holds {holds}, the code no longer reaches it "
        f"(it stopped after {ctx.steps_taken} step(s))",
    )


async def replay_against(
    registry: Registry, instance: InstanceRecord, journal: Journal, *, codec: Codec
) -> ReplayVerdict:
    """Replay against the registry's code for the version the instance is pinned to."""
    try:
        definition = registry.get(instance.workflow_name, instance.workflow_version)
    except (UnknownWorkflowError, UnknownVersionError):
        return ReplayVerdict(
            instance_id=instance.instance_id,
            workflow=instance.workflow_name,
            version=instance.workflow_version,
            fingerprint="",
            status=instance.status.value,
            compatible=False,
            replayed=0,
            kind="refused",
            reason=f"the registry has no {instance.workflow_name} v{instance.workflow_version}",
        )
    return await replay(definition, instance, journal, codec=codec, registry=registry)
