"""Errors of operator commands and the perimeter: not authorized, not authenticated, a
token name taken, the API unreachable, a repair refused or planned against a gone state
(internal: import errors from :mod:`ledgerflow.errors`)."""

from __future__ import annotations

from ledgerflow.errors.base import LedgerflowError


class OperatorError(LedgerflowError):
    """An operator command could not be carried out; nothing was changed."""

    code = "LF700"


class NotAuthorizedError(OperatorError):
    """The actor may not run this command: no grant of the authority file, or no token role,
    allows it."""

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


class TokenNameTakenError(OperatorError):
    """A live token acts under this name already: a name is one principal (the audit log's
    actor, an approver), so two live tokens may not share it."""

    code = "LF705"
    ID_NAMES = ("name", "token_id")

    def __init__(
        self, message: str | None = None, *, name: str | None = None, token_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.name = name
        # The live token that holds the name.
        self.token_id = token_id


class ApiUnreachableError(OperatorError):
    """The HTTP API the command line was pointed at (``--url``, acting with ``--token``) could
    not be reached, or did not answer as Ledgerflow's API answers. When the request may have
    been sent before the connection failed, whether it was carried out is not known."""

    code = "LF706"
    ID_NAMES = ("url",)

    def __init__(self, message: str | None = None, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


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
