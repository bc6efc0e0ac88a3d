"""What the engines add to a debounced start (internal): the answer's ``debounced``, and the
refusal of a debounce where a start carries more than its input. The rules themselves are
:mod:`ledgerflow.model.debounce`'s and the store's (storage/sql_debounce.py)."""

from __future__ import annotations

from ledgerflow.errors import PayloadError
from ledgerflow.ledger.records import InstanceRecord, NewInstance
from ledgerflow.model.debounce import DEBOUNCED
from ledgerflow.model.instance import InstanceStatus


def collapsed(new: NewInstance, found: InstanceRecord, created: bool) -> bool:
    """Whether a start's answer is a collapse into its key's pending instance: a debounced
    start that found it, in the start's transaction, still SCHEDULED by a debounced start,
    unclaimed, not cancelled and holding this start's input (a start the key's rules decided
    found it claimed, begun, ended or cancelled: see storage/sql_debounce.py)."""
    return (
        not created
        and new.debounce is not None
        and found.status is InstanceStatus.SCHEDULED
        and found.reason_code == DEBOUNCED
        and found.owner is None
        and found.cancel_requested_at is None
        and found.input == new.input
    )


def refuse_debounce(new: NewInstance, what: str) -> None:
    """Only a plain start debounces: an event or an update sent with a start is for the
    instance the start names, and a collapse would leave it with another input's run."""
    if new.debounce is not None:
        raise PayloadError(f"{what} takes no debounce_seconds: debounce a plain start")
