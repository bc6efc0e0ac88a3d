"""Errors of the ledger's rules and of workflow runs: races lost, illegal transitions, unknown
instances, results not there, steps that could not produce one, declared business outcomes
(internal: import errors from :mod:`ledgerflow.errors`)."""

from __future__ import annotations

from typing import ClassVar

from ledgerflow.errors.base import LedgerflowError, identities


@identities
class ConcurrencyError(LedgerflowError):
    """Another party changed what this one meant to change."""

    code = "LF300"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("instance_id", "event_id", "run_id")

    instance_id: str | None = None
    # An event id already used for another event (a delivery).
    event_id: str | None = None
    # A reconciliation run finished twice.
    run_id: int | None = None


@identities
class FencedOutError(ConcurrencyError):
    """A write carried a stale fencing generation and was rejected by the store."""

    code = "LF301"
    ID_NAMES = ("instance_id", "generation")

    generation: int | None = None


class EventArrivedError(ConcurrencyError):
    """An event arrived before the wait's timeout was recorded: the event wins."""

    code = "LF302"


class CancelArrivedError(ConcurrencyError):
    """A cancel request reached the instance before a new effect, wait or timer was recorded:
    the request wins, nothing new starts."""

    code = "LF303"


@identities
class IdempotencyKeyReusedError(ConcurrencyError):
    """An Idempotency-Key was sent again with another request (or, in a journal of Ledgerflow
    0.1.0, while a claim its dead server left is recent); the new request was not carried out."""

    code = "LF304"
    ID_NAMES = ("key",)

    # The Idempotency-Key header's value.
    key: str | None = None


@identities
class EventRefusedError(ConcurrencyError):
    """An event was kept in the inbox but refused: it came too late for its step or run, or
    the instance had ended. It changed nothing and never will."""

    code = "LF305"
    ID_NAMES = ("instance_id", "event_id", "refusal")

    # Why: "late" or "ended".
    refusal: str | None = None


class RetryTransactionError(ConcurrencyError):
    """The caller's own transaction (``engine.within(connection)``) met a conflict it cannot
    read past: a serialization failure under REPEATABLE READ or SERIALIZABLE, a deadlock, a
    SQLite snapshot older than a commit made since. The engine's writes were rolled back to
    their savepoint and never retried inside it: roll the whole transaction back and run it
    again."""

    code = "LF318"


@identities
class IllegalTransitionError(LedgerflowError):
    """The state machine does not allow this transition."""

    code = "LF310"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("machine", "state", "event", "instance_id", "effect_id")

    machine: str | None = None
    state: str | None = None
    # The refused event (every write names its event; see model.machine).
    event: str | None = None
    instance_id: str | None = None
    effect_id: str | None = None


@identities
class UnsettledEffectsError(IllegalTransitionError):
    """A run may not continue as new while one of its effects is not settled (intended,
    dispatched, accepted or in doubt): its outcome would be left to a run nobody replays."""

    code = "LF520"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("instance_id", "run", "unsettled")

    # The run that asked to continue.
    run: int | None = None
    # How many of its effects are not settled.
    unsettled: int | None = None


@identities
class InstanceNotFoundError(LedgerflowError):
    """No workflow instance has this id."""

    code = "LF400"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("instance_id", "event_id", "key")

    instance_id: str | None = None
    # An event the instance does not hold (a delivery asked for by its id).
    event_id: str | None = None
    # An idempotency key no effect has (a callback for an unknown effect).
    key: str | None = None


@identities
class NotCommittedError(InstanceNotFoundError):
    """The instance was started (or the signal, the cancel request written) inside a caller's
    transaction that has not committed: no other connection sees it yet, and it may never be
    if the caller rolls back. ``state`` says which: ``open`` (the caller's transaction is still
    open) or ``rolled-back`` (it ended without the writes)."""

    code = "LF317"
    ID_NAMES = ("instance_id", "state")

    state: str | None = None


@identities
class ResultTimeoutError(LedgerflowError):
    """The instance did not reach a terminal state in the time given."""

    code = "LF401"
    ID_NAMES = ("instance_id",)

    instance_id: str | None = None


@identities
class UpdateRejectedError(LedgerflowError):
    """An update was refused before it was stored: its validator raised (the message says
    why), or the instance ended before its workflow handled it. The journal holds no trace."""

    code = "LF560"
    ID_NAMES = ("instance_id", "update_id")

    instance_id: str | None = None
    update_id: str | None = None


class NoCapableWorkerError(ResultTimeoutError):
    """The instance did not end in the time given, and no live worker serves the code it is
    pinned to: the message names the fingerprint, what the live workers serve, and how it
    moves."""

    code = "LF403"


@identities
class WorkflowError(LedgerflowError):
    """The instance ended without a result; ``status`` and ``reason`` say how, and ``cause``
    what led to it (the workflow's own error behind a COMPENSATED instance, say)."""

    code = "LF402"
    ID_NAMES = ("instance_id", "status", "reason_code")

    instance_id: str | None = None
    status: str | None = None
    reason_code: str | None = None
    # Not an identity (so not in the text's suffix): what took the instance off its path.
    cause: str | None = None


@identities
class StepError(LedgerflowError):
    """A step could not produce a result."""

    code = "LF500"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("instance_id", "seq")

    instance_id: str | None = None
    # The step's position in the journal.
    seq: int | None = None


@identities
class StepFailedError(StepError):
    """A local step failed on its last allowed attempt.

    ``business`` is the verdict journaled with the step's failure: whether the step's own
    exception was a business failure of the workflow (a ``BusinessFailure``, a declared type).
    Raised into workflow code and not handled there, a business one ends the instance as a
    business failure does; any other is a defect, and parks it (see ``model/defects.py``).
    """

    code = "LF501"

    business: bool = True


@identities
class EffectFailedError(StepError):
    """The participant proved the effect was not applied, and no attempt is left."""

    code = "LF502"
    ID_NAMES = ("instance_id", "effect_id")

    effect_id: str | None = None


class WaitTimeoutError(StepError):
    """The wait's timeout came before any event it would accept."""

    code = "LF503"


@identities
class LockTimeoutError(StepError):
    """A durable lock (``ctx.lock``) was not granted before its ``timeout``: the instance left
    the lock's queue in the commit that recorded the timeout, so it holds nothing of it."""

    code = "LF550"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("instance_id", "seq", "lock")

    # The lock's name.
    lock: str | None = None


@identities
class LockDeadlockError(StepError):
    """Queueing for a durable lock would close a cycle of instances each waiting for a lock the
    next holds: the acquiring is answered with this instead of a place in the queue (decided
    in the acquiring's own transaction, so exactly one of the instances closing the cycle gets
    it), and the instance holds nothing of that lock."""

    code = "LF551"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("instance_id", "seq", "lock", "cycle")

    # The lock asked for.
    lock: str | None = None
    # The cycle, as "instance holds lock" hops from the holder of the lock asked for.
    cycle: str | None = None


class BusinessFailure(LedgerflowError):  # noqa: N818 - an outcome the workflow means, not an error of its code
    """A failure the workflow raises on purpose; it compensates (or fails) the instance.

    Subclass it for each business outcome that ends an instance without its result::

        class InsufficientFunds(ledgerflow.BusinessFailure):
            pass

        raise InsufficientFunds(f"balance {balance} is below {amount}")

    Any other exception that escapes workflow code is a defect: retried a bounded number of
    times, then parked ``workflow_defect`` with nothing compensated (see
    ``docs/versioning.md``). A workflow may also declare other exception types as its
    business failures (``Registry.workflow(business_failures=...)``).
    """

    code = "LF510"


@identities
class EffectRejectedError(LedgerflowError):
    """Raised by participant code: the effect was provably not applied.

    ``error_code`` is the participant's own reason (matched by a retry policy's ``retry_on``);
    ``retryable=False`` makes the rejection final whatever the policy says.
    """

    code = "LF600"
    ID_NAMES = ("error_code",)

    error_code: str = "rejected"
    retryable: bool = True


@identities
class KeyInUseError(ConcurrencyError):
    """A start's business key names an instance this start may not return: it was started
    with another input or version, or the start's policy (``if_running`` / ``if_ended``
    ``"fail"``) refuses it. Nothing was started; ``instance_id`` is the key's holder."""

    code = "LF311"
    ID_NAMES = ("instance_id", "key", "status", "run")

    # The business key, and the holder's status and run when the start was refused.
    key: str | None = None
    status: str | None = None
    run: int | None = None


@identities
class TargetNotFoundError(StepError):
    """A workflow sent a signal to an instance that does not exist (``ctx.signal_instance``);
    recorded as the step's failure, so a replay raises it again without sending."""

    code = "LF530"
    ID_NAMES = ("instance_id", "seq", "target")

    # The instance the signal was meant for.
    target: str | None = None


@identities
class AttemptSupersededError(ConcurrencyError):
    """An effect's heartbeat came from an attempt that is no longer the one in flight: the
    effect moved on (its outcome recorded, made UNKNOWN after a missed heartbeat, or a later
    attempt dispatched), or another owner holds the instance. Nothing was written; the attempt
    should stop: whatever it still returns is refused."""

    code = "LF312"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("instance_id", "effect_id", "attempt")

    instance_id: str | None = None
    effect_id: str | None = None
    attempt: int | None = None


@identities
class SlotTakenError(ConcurrencyError):
    """A schedule's tick lost the race: another worker decided these slots first (the
    schedule's cursor or buffered slot moved since the tick was planned). Nothing of the
    losing tick is durable, its starts included; the next tick plans from the new cursor."""

    code = "LF540"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("schedule",)

    schedule: str | None = None


@identities
class ScheduleNotFoundError(LedgerflowError):
    """No schedule has this name (or it was deleted)."""

    code = "LF541"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("schedule",)

    schedule: str | None = None
