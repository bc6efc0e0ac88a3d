"""What a child's ending writes beside itself for its parent (internal).

A child that reaches a terminal status (SUCCEEDED, FAILED, COMPENSATED, CANCELLED,
FORWARD_RECOVERY_REQUIRED, MANUAL_INTERVENTION) delivers its outcome to its parent's inbox, for
the parent's run and position that started it, in the ending's own transaction
(``Session.commit`` adds the delivery to any commit that ends a child), so no ending is durable
without it. The event (:func:`~ledgerflow.ledger.children.child_ending`) names the child, status
and generation: an ending is kept once however often its commit is tried, and a child resumed by
an operator and ending again is kept again. A parent that ended first, or whose position is
closed, keeps it as refused (with the reason): the outcome is never lost. The residual effects
(confirmed, not undone) are read from the child's own journal here.

The other direction, a parent's final ending reaching its live children, is the store's: the
ending's own statements ask each child started with ``on_parent_end="cancel"`` to cancel
(``cancel_children``), whoever wrote the ending (a worker or an operator's repair).
"""

from __future__ import annotations

from collections.abc import Iterable

from ledgerflow.ledger.children import child_ending
from ledgerflow.ledger.records import InstanceRecord, InstanceWrite, Journal, Write
from ledgerflow.ledger.transaction import Deliver
from ledgerflow.model.effect import EffectState
from ledgerflow.model.instance import TERMINAL_STATUSES


def ending_writes(
    instance: InstanceRecord, journal: Journal, cause: str | None, writes: Iterable[Write]
) -> tuple[Deliver, ...]:
    """The delivery to its parent that an ending of ``instance`` among ``writes`` carries (none
    when the commit ends nothing, or the instance is no child); ``cause`` is what its session
    knows led there."""
    if instance.parent_instance_id is None:
        return ()
    ending = next(
        (w for w in writes if isinstance(w, InstanceWrite) and w.status in TERMINAL_STATUSES),
        None,
    )
    if ending is None:
        return ()
    delivery = child_ending(
        instance,
        status=ending.status,
        generation=instance.generation,
        reason_code=ending.reason_code,
        cause=ending.cause or cause,
        result=ending.result,
        residual=_residual(journal),
    )
    return (delivery,)


def _residual(journal: Journal) -> list[str]:
    """The confirmed effects that stay applied: not undone by a confirmed compensation."""
    effects = journal.effects.values()
    undone = {
        e.compensates
        for e in effects
        if e.compensates is not None and e.state is EffectState.CONFIRMED
    }
    return [
        f"{e.participant}.{e.operation}"
        for e in sorted(effects, key=lambda e: e.seq)
        if e.compensates is None and e.state is EffectState.CONFIRMED and e.effect_id not in undone
    ]
