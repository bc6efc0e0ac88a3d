"""Errors of operator commands and the perimeter: not authorized, not authenticated, a
token name taken, the API unreachable, a repair refused or planned against a gone state
(internal: import errors from :mod:`ledgerflow.errors`)."""

from __future__ import annotations

from ledgerflow.errors.base import LedgerflowError, identities


class OperatorError(LedgerflowError):
    """An operator command could not be carried out; nothing was changed."""

    code = "LF700"


@identities
class NotAuthorizedError(OperatorError):
    """The actor may not run this command: no grant of the authority file, or no token role,
    allows it."""

    code = "LF701"
    ID_NAMES = ("actor", "kind")

    actor: str | None = None
    # The repair kind asked for (``resume``, ``force-terminal``...).
    kind: str | None = None


class NotAuthenticatedError(OperatorError):
    """No valid credentials came with the request: no token, an unknown one or a revoked one."""

    code = "LF704"


@identities
class TokenNameTakenError(OperatorError):
    """A live token acts under this name already: a name is one principal (the audit log's
    actor, an approver), so two live tokens may not share it."""

    code = "LF705"
    ID_NAMES = ("name", "token_id")

    name: str | None = None
    # The live token that holds the name.
    token_id: str | None = None


@identities
class ApiUnreachableError(OperatorError):
    """The HTTP API the command line was pointed at (``--url``, acting with ``--token``) could
    not be reached, or did not answer as Ledgerflow's API answers. When the request may have
    been sent before the connection failed, whether it was carried out is not known."""

    code = "LF706"
    ID_NAMES = ("url",)

    url: str | None = None


@identities
class ParticipantUnreachableError(OperatorError):
    """``ledgerflow check-participant`` could not connect to the participant it was pointed at
    (its declared ``base_url`` or ``--url``); no claim was judged."""

    code = "LF708"
    ID_NAMES = ("url",)

    url: str | None = None


@identities
class RepairRefusedError(OperatorError):
    """The state machine or the ledger forbids this repair from the instance's current state."""

    code = "LF702"
    ID_NAMES = ("instance_id",)

    instance_id: str | None = None


class StalePreconditionError(RepairRefusedError):
    """The state the repair was planned against is gone: someone else acted first."""

    code = "LF703"


@identities
class WaitChildrenLiveError(RepairRefusedError):
    """A repair would end a parent while children it started with ``on_parent_end="wait"``
    have not ended: its ending comes after theirs (``children`` names them)."""

    code = "LF707"

    children: tuple[str, ...] = ()
