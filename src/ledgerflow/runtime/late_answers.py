"""Answers that come after a dispatch's deadline: kept as evidence, never taken (internal).

At its deadline a dispatch's outcome is UNKNOWN and settled by the participant's lookup, a
same-key re-dispatch or a person. Participant code that ignores the cancellation may still
answer later; that answer is kept in the instance's inbox as a refused, late event
(``late-answer:<effect id>``), where the lookup's caller, the operator and ``show`` can see it,
and it changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ledgerflow.ledger.transaction import Deliver
from ledgerflow.model.ids import EffectId, IdempotencyKey, StepSeq
from ledgerflow.runtime.session import Session

log = logging.getLogger("ledgerflow.effects")

# Late answers on their way into the inbox, held until stored.
_keeping: set[asyncio.Task[Any]] = set()


def late_answer_keeper(
    session: Session,
    *,
    key: IdempotencyKey,
    effect_id: EffectId,
    participant: str,
    seq: StepSeq,
    attempt: int,
) -> Callable[[Any], None]:
    """What to do with one attempt's answer if it comes after its deadline."""
    store, codec = session.store, session.codec

    def keep(answer: Any) -> None:
        try:
            text = codec.encode({"attempt": attempt, "answer": answer})
        except Exception:  # noqa: BLE001 - an answer that is not JSON is kept by its repr.
            text = codec.encode({"attempt": attempt, "answer": repr(answer)[:2000]})
        task = asyncio.ensure_future(
            store.deliver(
                Deliver(
                    instance_id=session.instance_id,
                    event_id=f"late-answer:{key}:{attempt}",
                    name=f"late-answer:{effect_id}",
                    payload=text,
                    sender=participant,
                    for_seq=seq,
                    run=session.instance.run,
                    refuse=(
                        "late",
                        f"attempt {attempt} answered after its deadline: kept as evidence, "
                        "not taken as the outcome",
                    ),
                ),
                now=session.clock.now(),
            )
        )
        _keeping.add(task)
        task.add_done_callback(_kept)

    return keep


def _kept(task: asyncio.Task[Any]) -> None:
    _keeping.discard(task)
    if not task.cancelled() and task.exception() is not None:
        # The engine may be closing; the UNKNOWN outcome is recorded all the same.
        log.warning("a late answer could not be kept: %s", task.exception())
