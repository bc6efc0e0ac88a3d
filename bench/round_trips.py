"""The store's transactions and statements for one signal through the HTTP API, counted.

``POST /v1/instances/{id}/signals/{name}`` with an ``Idempotency-Key``, by an operator token,
to an instance waiting for it, through the real app in-process (FastAPI's test client) on a
SQLite journal: the SQLite dialect's BEGINs (write and read transactions) and its statements
are counted while the one request is answered. Runs on any checkout that has the SQLite
dialect's ``_execute``/``_run`` seam (so it compares a change against the main it started
from: run it in both trees). Prints JSON.

    python bench/round_trips.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from ledgerflow import Registry, WorkflowContext
from ledgerflow.operators.service import Operations
from ledgerflow.storage.sqlite import SqliteStore
from ledgerflow.web.app import create_app

registry = Registry()


@registry.workflow(name="forever", version=1)
async def forever(ctx: WorkflowContext, _: None) -> Any:
    got = await ctx.wait_for("go")
    return got.payload


def _counting(counts: Counter[str]) -> Callable[[], None]:
    """Count the dialect's transactions and statements; return what undoes it."""
    execute, run = SqliteStore._execute, SqliteStore._run

    def counted_execute(self: SqliteStore, sql: str) -> Any:
        if sql.startswith("BEGIN IMMEDIATE"):
            counts["write_transactions"] += 1
        elif sql.startswith("BEGIN"):
            counts["read_transactions"] += 1
        return execute(self, sql)

    def counted_run(self: SqliteStore, name: str, params: Any) -> Any:
        counts["statements"] += 1
        counts[f"statement:{name}"] += 1
        return run(self, name, params)

    SqliteStore._execute = counted_execute  # type: ignore[method-assign]
    SqliteStore._run = counted_run  # type: ignore[method-assign]

    def undo() -> None:
        SqliteStore._execute = execute  # type: ignore[method-assign]
        SqliteStore._run = run  # type: ignore[method-assign]

    return undo


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="lf-round-trips-"))
    url = f"sqlite:///{folder}/journal.db"
    with Operations(url, registry=registry, migrate=None) as operations:
        token, _ = operations.tokens().create(
            name="olga", role="operator", tenant="default", created_by="bench"
        )
        instance_id = operations.start("forever", key="k-1").instance_id
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "K-1"}
    counts: Counter[str] = Counter()
    with TestClient(create_app(url, registry=registry)) as client:
        undo = _counting(counts)
        try:
            answer = client.post(
                f"/v1/instances/{instance_id}/signals/go",
                json={"event_id": "e-1", "payload": 1},
                headers=headers,
            )
        finally:
            undo()
    if answer.status_code != 202:
        sys.exit(f"the signal was answered {answer.status_code}: {answer.text}")
    transactions = counts["write_transactions"] + counts["read_transactions"]
    print(
        json.dumps(
            {
                "path": "POST /v1/instances/{id}/signals/{name} with an Idempotency-Key",
                "backend": "sqlite",
                "transactions": transactions,
                "write_transactions": counts["write_transactions"],
                "read_transactions": counts["read_transactions"],
                "statements": counts["statements"],
                "by_statement": {
                    k.removeprefix("statement:"): v
                    for k, v in sorted(counts.items())
                    if k.startswith("statement:")
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
