"""The participant kit behind a message broker's consumer (RabbitMQ, NATS...): one message in,
one reply out.

The transport (consuming, acknowledging, publishing the reply) is the consumer's; this module
is only what a message means to the kit, so that every transport answers alike. A consumer acks
the message only after it published the reply :func:`handle_message` returned: the kit's record
is committed by then, so a redelivery of the same message is answered with the same receipt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ledgerflow.participant.kit import Applied, BusinessWrite, Kit, Refused
from ledgerflow.participant.kit_request import KitRequest

_CORRELATION = ("effect_id", "attempt", "generation", "key")


async def handle_message(
    kit: Kit[Any],
    message: Mapping[str, Any],
    *,
    operations: Mapping[str, BusinessWrite[Any]],
) -> dict[str, Any]:
    """Apply one effect message through ``kit``; return the reply to publish.

    The message (a dict decoded from the broker's JSON body)::

        {"effect_id": str, "attempt": int >= 1, "generation": int, "key": str,
         "operation": str, "payload": <JSON>,
         "instance_id": str (optional), "original_key": str (a compensation only)}

    The reply carries the message's correlation fields unchanged (``effect_id``, ``attempt``,
    ``generation``, ``key``) and one of::

        {"status": "applied", "receipt": <JSON>, "duplicate": bool}
        {"status": "rejected", "error_code": str, "retryable": bool, "message": str}

    ``applied`` is the key's first receipt (``duplicate`` true when an earlier message applied
    it); ``rejected`` proves nothing was applied by this message (the business write refused, a
    lookup fenced the attempt, the key was used for something else, or the operation is not in
    ``operations``: ``unknown_operation``). A message that is not of this shape raises
    ``ValueError`` before anything is applied: it is not a request, so it gets no reply (dead-
    letter it). Anything else the business write raises propagates, nothing committed: do not
    ack, so the message is redelivered or dead-lettered.
    """
    effect_id, generation = message.get("effect_id"), message.get("generation")
    if not isinstance(effect_id, str) or not effect_id:
        raise ValueError("'effect_id' must be a non-empty string")
    if not isinstance(generation, int) or isinstance(generation, bool):
        raise ValueError("'generation' must be an integer")
    request = KitRequest.from_wire(message)
    reply: dict[str, Any] = {name: message[name] for name in _CORRELATION}
    do = operations.get(request.operation)
    if do is None:
        outcome: Applied | Refused = Refused(
            "unknown_operation", False, f"no operation {request.operation!r}"
        )
    else:
        outcome = await asyncio.to_thread(kit.apply_request, request, do)
    # ``applied`` with ``evidence`` or ``reason`` is what the relay reads (runtime/relay.py).
    if isinstance(outcome, Refused):
        reply.update(
            applied=False,
            reason=f"{outcome.error_code}: {outcome.message}",
            status="rejected",
            error_code=outcome.error_code,
            retryable=outcome.retryable,
            message=outcome.message,
        )
    else:
        reply.update(
            applied=True,
            evidence=outcome.receipt,
            status="applied",
            receipt=outcome.receipt,
            duplicate=not outcome.first,
        )
    return reply
