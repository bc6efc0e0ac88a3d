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
    │   ├── ArrivalsError             a script of arrivals for ``ledgerflow verify`` is malformed
    │   └── NoTransactionError        a connection lent to the engine holds no transaction to join
    ├── PayloadError                  a field or payload missing, invalid, not JSON or too large
    │   ├── PayloadTooLargeError      a request body past its bound, refused before it is read
    │   └── InboxFullError            an event past its instance's inbox bounds; not kept
    │   └── ReservedNameError         a name only Ledgerflow itself may write (``complete:``...)
    ├── RequestError                  an HTTP request the API cannot take as it was sent
    │   ├── RouteNotFoundError        no route has this path
    │   ├── MethodNotAllowedError     the route exists, not with this method
    │   ├── UnsupportedMediaTypeError a body that is not the media type the route reads
    │   ├── InvalidCursorError        a listing's cursor this API did not give
    │   ├── HostNotAllowedError       a Host header naming a host this server does not answer for
    │   ├── RequestTimeoutError       a request's head or body did not arrive within its bound
    │   └── ServerBusyError           every connection the server may hold is in use
    ├── StorageError                  the store could not do what was asked
    │   ├── StorageUnavailableError   transient: busy, locked, unreachable
    │   ├── StorageCorruptError       the file is not a readable database
    │   ├── ForeignDatabaseError      a database that is not Ledgerflow's; left untouched
    │   │   └── ForeignConnectionError  a connection lent to the engine is not to its journal
    │   ├── SchemaVersionError        not at this Ledgerflow's schema version, or history altered
    │   ├── StoreNotFoundError        no journal (file, database) where the URL points
    │   └── StorageAccessError        the database refused these credentials
    ├── ConcurrencyError
    │   ├── FencedOutError            a write from an owner whose generation is stale
    │   ├── EventArrivedError         a wait's timeout lost the race to an event
    │   ├── CancelArrivedError        a new step lost the race to a cancel request
    │   ├── IdempotencyKeyReusedError an Idempotency-Key sent again with another request
    │   ├── EventRefusedError         an event kept but refused: too late, or the instance ended
    │   ├── RetryTransactionError     the caller's transaction lost a conflict: run it again
    │   ├── ChildKeyConflictError     a child's explicit key is held by an unrelated instance
    │   ├── KeyInUseError             a business key's instance this start may not return
    │   ├── AttemptSupersededError    an effect's heartbeat from an attempt no longer in flight
    │   └── SlotTakenError            another worker decided a schedule's slots first
    ├── IllegalTransitionError        a state change the state machine does not allow
    │   └── UnsettledEffectsError     continue-as-new while an effect of the run is unsettled
    ├── InstanceNotFoundError
    │   └── NotCommittedError         written in a caller's transaction that has not committed
    ├── ScheduleNotFoundError         no schedule has this name (or it was deleted)
    ├── ResultTimeoutError            waited for a result that did not come in time
    │   └── NoCapableWorkerError      ... and no live worker serves the code it is pinned to
    ├── UpdateRejectedError           an update its validator refused, or that came too late
    ├── WorkflowError                 the instance ended without a result
    ├── StepError                     raised into workflow code
    │   ├── StepFailedError           a local step used up its attempts
    │   ├── EffectFailedError         an effect is proven not applied and no attempt is left
    │   ├── WaitTimeoutError          a wait's timeout came before its event
    │   ├── TargetNotFoundError       a workflow signalled an instance that does not exist
    │   ├── ChildWorkflowError        a child workflow ended without a result
    │   │   ├── ChildFailedError      ... FAILED: nothing of it was committed
    │   │   ├── ChildCompensatedError ... COMPENSATED: it undid what it did
    │   │   ├── ChildCancelledError   ... CANCELLED, with the effects that stay
    │   │   ├── ChildNeedsInterventionError  ... MANUAL_INTERVENTION: a person decides
    │   │   └── ChildForwardRecoveryRequiredError  ... after a pivot: only forward steps
    │   ├── LockTimeoutError          a durable lock was not granted before its timeout
    │   └── LockDeadlockError         waiting for a durable lock would close a cycle
    └── BusinessFailure               raised by workflow code on purpose: a declared failure

    OperatorError                 an operator command could not be carried out; nothing changed
    ├── NotAuthorizedError        no grant (authority file) or token role allows this command
    ├── NotAuthenticatedError     no valid credentials: a missing, unknown or revoked token
    ├── TokenNameTakenError       a live token acts under this name already
    ├── ApiUnreachableError       the command line's --url gave no answer Ledgerflow's API gives
    ├── ParticipantUnreachableError  check-participant could not connect to the participant
    └── RepairRefusedError        the state machine or the ledger forbids this repair here
        ├── StalePreconditionError  the state the repair expected is gone (someone acted first)
        └── WaitChildrenLiveError   it would end a parent before its "wait" children ended

    EffectRejectedError (also a LedgerflowError) is what participant code raises to prove that
    the effect was *not* applied; any other exception from a dispatch means UNKNOWN.

Each error has a stable ``code`` documented in ``docs/errors.md`` and carries the identities
involved as typed attributes (``error.instance_id``, ``error.generation``...), declared on the
class that carries them, keyword-only where it is raised, ``None`` when not known. Its text
names the known ones after the message, in the order ``ID_NAMES`` lists them. An UNKNOWN
effect outcome is data in the ledger, not an exception.

The classes are defined by concept in this package's modules (``base``, ``inputs``,
``storage``, ``ledger``, ``operators``, ``children``); import them from here, which is the
public name.
"""

from __future__ import annotations

from ledgerflow.errors.base import (
    LedgerflowError,
)
from ledgerflow.errors.children import (
    ChildCancelledError,
    ChildCompensatedError,
    ChildFailedError,
    ChildForwardRecoveryRequiredError,
    ChildKeyConflictError,
    ChildNeedsInterventionError,
    ChildWorkflowError,
)
from ledgerflow.errors.inputs import (
    ArrivalsError,
    CommandLineError,
    ConfigurationError,
    HostNotAllowedError,
    InboxFullError,
    InvalidCursorError,
    MethodNotAllowedError,
    MissingExtraError,
    NoTransactionError,
    PayloadError,
    PayloadTooLargeError,
    RegistrationError,
    RequestError,
    RequestTimeoutError,
    ReservedNameError,
    RouteNotFoundError,
    ServerBusyError,
    UnknownVersionError,
    UnknownWorkflowError,
    UnsupportedMediaTypeError,
    VersionRetiredError,
)
from ledgerflow.errors.ledger import (
    AttemptSupersededError,
    BusinessFailure,
    CancelArrivedError,
    ConcurrencyError,
    EffectFailedError,
    EffectRejectedError,
    EventArrivedError,
    EventRefusedError,
    FencedOutError,
    IdempotencyKeyReusedError,
    IllegalTransitionError,
    InstanceNotFoundError,
    KeyInUseError,
    LockDeadlockError,
    LockTimeoutError,
    NoCapableWorkerError,
    NotCommittedError,
    ResultTimeoutError,
    RetryTransactionError,
    ScheduleNotFoundError,
    SlotTakenError,
    StepError,
    StepFailedError,
    TargetNotFoundError,
    UnsettledEffectsError,
    UpdateRejectedError,
    WaitTimeoutError,
    WorkflowError,
)
from ledgerflow.errors.operators import (
    ApiUnreachableError,
    NotAuthenticatedError,
    NotAuthorizedError,
    OperatorError,
    ParticipantUnreachableError,
    RepairRefusedError,
    StalePreconditionError,
    TokenNameTakenError,
    WaitChildrenLiveError,
)
from ledgerflow.errors.storage import (
    ForeignConnectionError,
    ForeignDatabaseError,
    SchemaVersionError,
    StorageAccessError,
    StorageCorruptError,
    StorageError,
    StorageUnavailableError,
    StoreNotFoundError,
)

__all__ = [
    "ApiUnreachableError",
    "ArrivalsError",
    "AttemptSupersededError",
    "BusinessFailure",
    "CancelArrivedError",
    "ChildCancelledError",
    "ChildCompensatedError",
    "ChildFailedError",
    "ChildForwardRecoveryRequiredError",
    "ChildKeyConflictError",
    "ChildNeedsInterventionError",
    "ChildWorkflowError",
    "CommandLineError",
    "ConcurrencyError",
    "ConfigurationError",
    "EffectFailedError",
    "EffectRejectedError",
    "EventArrivedError",
    "EventRefusedError",
    "FencedOutError",
    "ForeignConnectionError",
    "ForeignDatabaseError",
    "HostNotAllowedError",
    "IdempotencyKeyReusedError",
    "IllegalTransitionError",
    "InboxFullError",
    "InstanceNotFoundError",
    "InvalidCursorError",
    "KeyInUseError",
    "LedgerflowError",
    "LockDeadlockError",
    "LockTimeoutError",
    "MethodNotAllowedError",
    "MissingExtraError",
    "NoCapableWorkerError",
    "NoTransactionError",
    "NotAuthenticatedError",
    "NotAuthorizedError",
    "NotCommittedError",
    "OperatorError",
    "ParticipantUnreachableError",
    "PayloadError",
    "PayloadTooLargeError",
    "RegistrationError",
    "RepairRefusedError",
    "RequestError",
    "RequestTimeoutError",
    "ReservedNameError",
    "ResultTimeoutError",
    "RetryTransactionError",
    "RouteNotFoundError",
    "ScheduleNotFoundError",
    "SchemaVersionError",
    "ServerBusyError",
    "SlotTakenError",
    "StalePreconditionError",
    "StepError",
    "StepFailedError",
    "StorageAccessError",
    "StorageCorruptError",
    "StorageError",
    "StorageUnavailableError",
    "StoreNotFoundError",
    "TargetNotFoundError",
    "TokenNameTakenError",
    "UnknownVersionError",
    "UnknownWorkflowError",
    "UnsettledEffectsError",
    "UnsupportedMediaTypeError",
    "UpdateRejectedError",
    "VersionRetiredError",
    "WaitChildrenLiveError",
    "WaitTimeoutError",
    "WorkflowError",
]
