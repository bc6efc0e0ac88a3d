"""Durable locks as operators see them: each held lock, its holder (marked when the holder is
parked, so a lock kept for a person's decision is never mistaken for one in use), since when,
and its queue in the order it will be handed on (``ledgerflow locks``, ``GET /v1/locks``). A
queue behind a lock nobody holds (a lost hand-over) is listed with ``"holder": null``.

Example::

    for lock in store.locks():
        print(lock_json(lock, now=time.time()))
"""

from __future__ import annotations

from typing import Any

from ledgerflow.ledger.locks import LockRecord


def lock_json(lock: LockRecord, *, now: float) -> dict[str, Any]:
    """One lock as ``ledgerflow locks --json`` and ``GET /v1/locks`` show it."""
    return {
        "name": lock.name,
        "tenant": lock.tenant,
        "holder": None
        if lock.holder_instance is None or lock.holder_status is None or lock.granted_at is None
        else {
            "instance_id": lock.holder_instance,
            "run": lock.holder_run,
            "seq": lock.holder_seq,
            "status": lock.holder_status.value,
            "parked": lock.parked,
            "granted_at": lock.granted_at,
            "held_seconds": round(max(0.0, now - lock.granted_at), 3),
        },
        "waiters": [
            {
                "instance_id": w.instance_id,
                "run": w.run,
                "seq": w.seq,
                "status": w.status.value,
                "enqueued_at": w.enqueued_at,
                "waited_seconds": round(max(0.0, now - w.enqueued_at), 3),
            }
            for w in lock.waiters
        ],
    }
