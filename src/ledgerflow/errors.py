"""Every error Ledgerflow raises, as one small tree a user can catch at any level.

::

    LedgerflowError
    ├── ConfigurationError            bad declaration or setting, found before anything runs
    │   ├── RegistrationError         a participant, effect or workflow declared wrongly
    │   ├── UnknownWorkflowError      no workflow of that name is registered
    │   ├── UnknownVersionError       the workflow exists, but not at that version
    │   ├── CommandLineError          a ``ledgerflow`` command line that cannot be understood
    │   ├── MissingExtraError         an optional part (``ledgerflow[http]``...) is not installed
    │   ├── VersionRetiredError       that version is retired: it starts no new instance
    │   └── ArrivalsError             a script of arrivals for ``ledgerflow verify`` is malformed
    ├── PayloadError                  input/output that cannot be encoded or is too large
    │   ├── PayloadTooLargeError      a request body past its bound, refused before it is read
    │   └── InboxFullError            an event past its instance's inbox bounds; not kept
    ├── RequestError                  an HTTP request the API cannot take as it was sent
    │   ├── RouteNotFoundError        no route has this path
    │   ├── MethodNotAllowedError     the route exists, not with this method
    │   ├── UnsupportedMediaTypeError a body that is not the media type the route reads
    │   └── InvalidCursorError        a listing's cursor this API did not give
    ├── StorageError                  the store could not do what was asked
    │   ├── StorageUnavailableError   transient: busy, locked, unreachable
    │   ├── StorageCorruptError       the file is not a readable database
    │   ├── ForeignDatabaseError      a database that is not Ledgerflow's; left untouched
    │   ├── SchemaVersionError        not at this Ledgerflow's schema version, or history altered
    │   ├── StoreNotFoundError        no journal (file, database) where the URL points
    │   └── StorageAccessError        the database refused these credentials
    ├── ConcurrencyError
    │   ├── FencedOutError            a write from an owner whose generation is stale
    │   ├── EventArrivedError         a wait's timeout lost the race to an event
    │   ├── CancelArrivedError        a new step lost the race to a cancel request
    │   ├── IdempotencyKeyReusedError an Idempotency-Key sent again with another request
    │   └── EventRefusedError         an event kept but refused: too late, or the instance ended
    ├── IllegalTransitionError        a state change the state machine does not allow
    ├── InstanceNotFoundError
    ├── ResultTimeoutError            waited for a result that did not come in time
    ├── WorkflowError                 the instance ended without a result
    ├── StepError                     raised into workflow code
    │   ├── StepFailedError           a local step used up its attempts
    │   ├── EffectFailedError         an effect is proven not applied and no attempt is left
    │   └── WaitTimeoutError          a wait's timeout came before its event
    └── BusinessFailure               raised by workflow code on purpose: a declared failure

    OperatorError                 an operator command could not be carried out; nothing changed
    ├── NotAuthorizedError        the actor holds no role that allows this command
    ├── NotAuthenticatedError     no valid credentials: a missing, unknown or revoked token
    └── RepairRefusedError        the state machine or the ledger forbids this repair here
        └── StalePreconditionError  the state the repair expected is gone (someone acted first)

    EffectRejectedError (also a LedgerflowError) is what participant code raises to prove that
    the effect was *not* applied; any other exception from a dispatch means UNKNOWN.

Each error has a stable ``code`` documented in ``docs/errors.md`` and carries the identities
involved as typed attributes (``error.instance_id``, ``error.generation``...), declared on the
class that carries them, keyword-only where it is raised, ``None`` when not known. Its text
names the known ones after the message, in the order ``ID_NAMES`` lists them. An UNKNOWN
effect outcome is data in the ledger, not an exception.
"""

from __future__ import annotations

from typing import Any, ClassVar


class LedgerflowError(Exception):
    """Something went wrong in Ledgerflow."""

    code: ClassVar[str] = "LF000"
    # The identity attributes this error carries, in the order its text names them.
    ID_NAMES: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str | None = None) -> None:
        text = message or (self.__doc__ or "").strip().splitlines()[0]
        super().__init__(text)
        self.message = text

    @property
    def ids(self) -> dict[str, Any]:
        """The identities involved that are known, by attribute name, in ``ID_NAMES`` order."""
        found = ((name, getattr(self, name, None)) for name in self.ID_NAMES)
        return {name: value for name, value in found if value is not None}

    def __str__(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.ids.items())
        suffix = f" ({extra})" if extra else ""
        return f"[{self.code}] {self.message}{suffix}"


class ConfigurationError(LedgerflowError):
    """A declaration or setting is invalid."""

    code = "LF100"


class RegistrationError(ConfigurationError):
    """A participant, effect or workflow is declared wrongly."""

    code = "LF101"


class UnknownWorkflowError(ConfigurationError):
    """No workflow of that name is registered."""

    code = "LF102"
    ID_NAMES = ("workflow",)

    def __init__(self, message: str | None = None, *, workflow: str | None = None) -> None:
        super().__init__(message)
        self.workflow = workflow


class UnknownVersionError(ConfigurationError):
    """The workflow is registered, but not at that version."""

    code = "LF103"
    ID_NAMES = ("workflow", "version")

    def __init__(
        self, message: str | None = None, *, workflow: str | None = None, version: int | None = None
    ) -> None:
        super().__init__(message)
        self.workflow = workflow
        self.version = version


class CommandLineError(ConfigurationError):
    """The command line could not be understood: an unknown option, a missing or bad value."""

    code = "LF104"


class MissingExtraError(ConfigurationError):
    """An optional part of Ledgerflow is not installed; the message names the extra to add."""

    code = "LF105"


class VersionRetiredError(ConfigurationError):
    """That workflow version is retired: no new instance may start pinned to it."""

    code = "LF106"
    ID_NAMES = ("workflow", "version")

    def __init__(
        self, message: str | None = None, *, workflow: str | None = None, version: int | None = None
    ) -> None:
        super().__init__(message)
        self.workflow = workflow
        self.version = version


class ArrivalsError(ConfigurationError):
    """A script of arrivals (``ledgerflow verify --arrivals FILE``, or the events of an
    ``Example``) is malformed: an unknown key, a sender that is not text, a payload that is not
    JSON, more arrivals than allowed."""

    code = "LF107"


class PayloadError(LedgerflowError):
    """A payload cannot be encoded as JSON or is larger than allowed."""

    code = "LF110"


class PayloadTooLargeError(PayloadError):
    """A request body is larger than its bound; it was refused before being read past it."""

    code = "LF111"


class InboxFullError(PayloadError):
    """The instance's inbox holds as many events no wait has taken as it may (in number or in
    payload bytes): the event was refused, not kept, only counted."""

    code = "LF112"
    ID_NAMES = ("instance_id", "event_id")

    def __init__(
        self,
        message: str | None = None,
        *,
        instance_id: str | None = None,
        event_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.instance_id = instance_id
        self.event_id = event_id


class RequestError(LedgerflowError):
    """An HTTP request the API cannot take as it was sent (its route, method or media type)."""

    code = "LF120"


class RouteNotFoundError(RequestError):
    """No route of the API has this path."""

    code = "LF121"


class MethodNotAllowedError(RequestError):
    """The route exists, but does not take this method."""

    code = "LF122"


class UnsupportedMediaTypeError(RequestError):
    """The body is not in the media type the route reads (application/json)."""

    code = "LF123"


class InvalidCursorError(RequestError):
    """A listing's cursor is not one this API gave (forged, altered or cut short)."""

    code = "LF124"


class StorageError(LedgerflowError):
    """The store could not do what was asked."""

    code = "LF200"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("path",)

    def __init__(self, message: str | None = None, *, path: str | None = None) -> None:
        super().__init__(message)
        # The SQLite file concerned (PostgreSQL errors name their URL in the message).
        self.path = path


class StorageUnavailableError(StorageError):
    """The store is busy or unreachable; the operation may be tried again."""

    code = "LF201"


class StorageCorruptError(StorageError):
    """The database file cannot be read as a database."""

    code = "LF202"
    ID_NAMES = ("path", "row")

    def __init__(
        self, message: str | None = None, *, path: str | None = None, row: str | None = None
    ) -> None:
        super().__init__(message, path=path)
        # The key of a row that breaks a ledger invariant (instance, step or effect id).
        self.row = row


class ForeignDatabaseError(StorageError):
    """The database holds tables that are not Ledgerflow's; it was not modified."""

    code = "LF203"


class SchemaVersionError(StorageError):
    """The schema is not the one this Ledgerflow uses (newer, older and not to be migrated
    here, or missing), or its migration history was altered."""

    code = "LF204"


class StoreNotFoundError(StorageError):
    """There is no journal where the URL points: no such file, or no such database."""

    code = "LF205"


class StorageAccessError(StorageError):
    """The database refused the connection's credentials or user."""

    code = "LF206"


class ConcurrencyError(LedgerflowError):
    """Another party changed what this one meant to change."""

    code = "LF300"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("instance_id", "event_id", "run_id")

    def __init__(
        self,
        message: str | None = None,
        *,
        instance_id: str | None = None,
        event_id: str | None = None,
        run_id: int | None = None,
    ) -> None:
        super().__init__(message)
        self.instance_id = instance_id
        # An event id already used for another event (a delivery).
        self.event_id = event_id
        # A reconciliation run finished twice.
        self.run_id = run_id


class FencedOutError(ConcurrencyError):
    """A write carried a stale fencing generation and was rejected by the store."""

    code = "LF301"
    ID_NAMES = ("instance_id", "generation")

    def __init__(
        self,
        message: str | None = None,
        *,
        instance_id: str | None = None,
        generation: int | None = None,
    ) -> None:
        super().__init__(message, instance_id=instance_id)
        self.generation = generation


class EventArrivedError(ConcurrencyError):
    """An event arrived before the wait's timeout was recorded: the event wins."""

    code = "LF302"


class CancelArrivedError(ConcurrencyError):
    """A cancel request reached the instance before a new effect, wait or timer was recorded:
    the request wins, nothing new starts."""

    code = "LF303"


class IdempotencyKeyReusedError(ConcurrencyError):
    """An Idempotency-Key was sent again with another request (or while its first request is
    still being answered); the new request was not carried out."""

    code = "LF304"
    ID_NAMES = ("key",)

    def __init__(self, message: str | None = None, *, key: str | None = None) -> None:
        super().__init__(message)
        # The Idempotency-Key header's value.
        self.key = key


class EventRefusedError(ConcurrencyError):
    """An event was kept in the inbox but refused: it came too late for its step or run, or
    the instance had ended. It changed nothing and never will."""

    code = "LF305"
    ID_NAMES = ("instance_id", "event_id", "refusal")

    def __init__(
        self,
        message: str | None = None,
        *,
        instance_id: str | None = None,
        event_id: str | None = None,
        refusal: str | None = None,
    ) -> None:
        super().__init__(message, instance_id=instance_id, event_id=event_id)
        # Why: "late" or "ended".
        self.refusal = refusal


class IllegalTransitionError(LedgerflowError):
    """The state machine does not allow this transition."""

    code = "LF310"
    ID_NAMES = ("machine", "state", "event", "instance_id", "effect_id")

    def __init__(
        self,
        message: str | None = None,
        *,
        machine: str | None = None,
        state: str | None = None,
        event: str | None = None,
        instance_id: str | None = None,
        effect_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.machine = machine
        self.state = state
        # The refused event (every write names its event; see model.machine).
        self.event = event
        self.instance_id = instance_id
        self.effect_id = effect_id


class InstanceNotFoundError(LedgerflowError):
    """No workflow instance has this id."""

    code = "LF400"
    ID_NAMES = ("instance_id", "event_id", "key")

    def __init__(
        self,
        message: str | None = None,
        *,
        instance_id: str | None = None,
        event_id: str | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.instance_id = instance_id
        # An event the instance does not hold (a delivery asked for by its id).
        self.event_id = event_id
        # An idempotency key no effect has (a callback for an unknown effect).
        self.key = key


class ResultTimeoutError(LedgerflowError):
    """The instance did not reach a terminal state in the time given."""

    code = "LF401"
    ID_NAMES = ("instance_id",)

    def __init__(self, message: str | None = None, *, instance_id: str | None = None) -> None:
        super().__init__(message)
        self.instance_id = instance_id


class WorkflowError(LedgerflowError):
    """The instance ended without a result; ``status`` and ``reason`` say how, and ``cause``
    what led to it (the workflow's own error behind a COMPENSATED instance, say)."""

    code = "LF402"
    ID_NAMES = ("instance_id", "status", "reason_code")

    def __init__(
        self,
        message: str | None = None,
        *,
        instance_id: str | None = None,
        status: str | None = None,
        reason_code: str | None = None,
        cause: str | None = None,
    ) -> None:
        super().__init__(message)
        self.instance_id = instance_id
        self.status = status
        self.reason_code = reason_code
        # Not an identity (so not in the text's suffix): what took the instance off its path.
        self.cause = cause


class StepError(LedgerflowError):
    """A step could not produce a result."""

    code = "LF500"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("instance_id", "seq")

    def __init__(
        self, message: str | None = None, *, instance_id: str | None = None, seq: int | None = None
    ) -> None:
        super().__init__(message)
        self.instance_id = instance_id
        # The step's position in the journal.
        self.seq = seq


class StepFailedError(StepError):
    """A local step failed on its last allowed attempt.

    ``business`` is the verdict journaled with the step's failure: whether the step's own
    exception was a business failure of the workflow (a ``BusinessFailure``, a declared type).
    Raised into workflow code and not handled there, a business one ends the instance as a
    business failure does; any other is a defect, and parks it (see ``model/defects.py``).
    """

    code = "LF501"

    def __init__(
        self,
        message: str | None = None,
        *,
        instance_id: str | None = None,
        seq: int | None = None,
        business: bool = True,
    ) -> None:
        super().__init__(message, instance_id=instance_id, seq=seq)
        self.business = business


class EffectFailedError(StepError):
    """The participant proved the effect was not applied, and no attempt is left."""

    code = "LF502"
    ID_NAMES = ("instance_id", "effect_id")

    def __init__(
        self,
        message: str | None = None,
        *,
        instance_id: str | None = None,
        effect_id: str | None = None,
    ) -> None:
        super().__init__(message, instance_id=instance_id)
        self.effect_id = effect_id


class WaitTimeoutError(StepError):
    """The wait's timeout came before any event it would accept."""

    code = "LF503"


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


class EffectRejectedError(LedgerflowError):
    """Raised by participant code: the effect was provably not applied.

    ``error_code`` is the participant's own reason (matched by a retry policy's ``retry_on``);
    ``retryable=False`` makes the rejection final whatever the policy says.
    """

    code = "LF600"
    ID_NAMES = ("error_code",)

    def __init__(
        self, message: str | None = None, *, error_code: str = "rejected", retryable: bool = True
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.retryable = retryable


class OperatorError(LedgerflowError):
    """An operator command could not be carried out; nothing was changed."""

    code = "LF700"


class NotAuthorizedError(OperatorError):
    """The actor holds no role that allows this command."""

    code = "LF701"
    ID_NAMES = ("actor", "kind")

    def __init__(
        self, message: str | None = None, *, actor: str | None = None, kind: str | None = None
    ) -> None:
        super().__init__(message)
        self.actor = actor
        # The repair kind asked for (``resume``, ``force-terminal``...).
        self.kind = kind


class NotAuthenticatedError(OperatorError):
    """No valid credentials came with the request: no token, an unknown one or a revoked one."""

    code = "LF704"


class RepairRefusedError(OperatorError):
    """The state machine or the ledger forbids this repair from the instance's current state."""

    code = "LF702"
    ID_NAMES = ("instance_id",)

    def __init__(self, message: str | None = None, *, instance_id: str | None = None) -> None:
        super().__init__(message)
        self.instance_id = instance_id


class StalePreconditionError(RepairRefusedError):
    """The state the repair was planned against is gone: someone else acted first."""

    code = "LF703"
