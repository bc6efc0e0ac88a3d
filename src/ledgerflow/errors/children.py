"""Errors of child workflows: a child's ending raised into its parent, and a child's key held
by an instance that is not that child (internal: import errors from :mod:`ledgerflow.errors`).

A child that did not succeed reaches its parent as the subclass of :class:`ChildWorkflowError`
its status names, never as a plain failure: a COMPENSATED child undid what it did, a
FORWARD_RECOVERY_REQUIRED one cannot undo it, a MANUAL_INTERVENTION one waits for a person.
"""

from __future__ import annotations

from typing import ClassVar

from ledgerflow.errors.base import identities
from ledgerflow.errors.ledger import ConcurrencyError, StepError


@identities
class ChildWorkflowError(StepError):
    """A child workflow ended without a result; ``status`` says how, ``cause`` what led to it.

    Raised into the parent at the position that started the child (``seq``). ``residual``
    lists the child's confirmed effects that stay applied (``participant.operation``), so a
    parent's saga can tell what it still owes."""

    code = "LF504"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("instance_id", "seq", "child_id", "status")

    child_id: str | None = None
    status: str | None = None
    reason_code: str | None = None
    # Not identities (so not in the text's suffix): what led to the ending, what stays.
    cause: str | None = None
    residual: tuple[str, ...] = ()


class ChildFailedError(ChildWorkflowError):
    """The child workflow FAILED: nothing it did was committed anywhere."""

    code = "LF505"


class ChildCompensatedError(ChildWorkflowError):
    """The child workflow was COMPENSATED: it failed after effects, and undid them all."""

    code = "LF506"


class ChildCancelledError(ChildWorkflowError):
    """The child workflow was CANCELLED; ``residual`` names the effects that stay."""

    code = "LF507"


class ChildNeedsInterventionError(ChildWorkflowError):
    """The child workflow stopped in MANUAL_INTERVENTION: a person must decide."""

    code = "LF508"


class ChildForwardRecoveryRequiredError(ChildWorkflowError):
    """The child workflow failed after a pivot (FORWARD_RECOVERY_REQUIRED): only forward
    steps may finish it, nothing of it is undone."""

    code = "LF509"


@identities
class ChildKeyConflictError(ConcurrencyError):
    """A child's explicit business key is held by another instance (not this parent's child
    at this position): the child is not started, and never attached to that instance."""

    code = "LF306"
    ID_NAMES = ("instance_id", "holder", "key")

    # The instance that holds the key, and the key.
    holder: str | None = None
    key: str | None = None
