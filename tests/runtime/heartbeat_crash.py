"""A worker process for the heartbeat stop test: a long effect that beats until it is told to
go on, stopped by SIGSTOP mid-effect and resumed (a zombie) after another worker settled it.

Run as ``python heartbeat_crash.py DB_URL KEY`` with ``LF_HEARTBEAT_FOLDER`` set: it starts
``batch`` under ``KEY`` and drives it with a lease far longer than the heartbeat timeout, so
only the missed heartbeat can let another worker take the instance over in time. The
participant's own record is two files in the folder: ``beats.log`` (every heartbeat an attempt
made and what the engine answered) and ``applied.log`` (what the participant applied, which
its lookup reads).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import ledgerflow as lf
from ledgerflow.errors import AttemptSupersededError
from ledgerflow.participant import LookupAnswer

HEARTBEAT_SECONDS = 1.0
# Far longer than the heartbeat timeout: the lease is not what frees the stopped worker's work.
LEASE_SECONDS = 30.0
BEAT_EVERY_SECONDS = 0.1
RESULT_TIMEOUT_SECONDS = 90.0

registry = lf.Registry()
bank = registry.add_participant(lf.Participant("bank"))


def folder() -> Path:
    return Path(os.environ["LF_HEARTBEAT_FOLDER"])


def note(name: str, line: dict[str, Any]) -> None:
    with (folder() / name).open("a") as out:
        out.write(json.dumps(line) + "\n")


def lines(name: str) -> list[dict[str, Any]]:
    path = folder() / name
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


@bank.effect(
    classification="compensatable", timeout_seconds=60, heartbeat_timeout=HEARTBEAT_SECONDS
)
async def settle(call: lf.EffectCall) -> dict[str, Any]:
    pid = os.getpid()
    if call.attempt == 1:
        # Beats until the test says go (it stops this process meanwhile), then beats once more
        # as the zombie it has become, and answers anyway.
        n = 0
        while not (folder() / "go").exists():
            n += 1
            answer = await call.heartbeat(n)
            note("beats.log", {"attempt": 1, "n": n, "pid": pid, "written": answer.written})
            await asyncio.sleep(BEAT_EVERY_SECONDS)
        try:
            answer = await call.heartbeat("zombie")
            note("beats.log", {"attempt": 1, "n": "zombie", "pid": pid, "written": answer.written})
        except AttemptSupersededError as exc:
            note("beats.log", {"attempt": 1, "n": "zombie", "pid": pid, "refused": exc.code})
        return {"attempt": 1, "zombie": True}
    resumed = call.last_heartbeat
    await call.heartbeat({"resumed_from": resumed})
    note("applied.log", {"key": call.idempotency_key, "attempt": call.attempt, "pid": pid})
    return {"attempt": call.attempt, "resumed_from": resumed}


@bank.lookup
async def find(key: str, attempt: int) -> LookupAnswer:
    applied = [x for x in lines("applied.log") if x["key"] == key]
    if applied:
        return LookupAnswer.applied({"attempt": applied[0]["attempt"], "via": "lookup"})
    return LookupAnswer.not_applied()


@registry.workflow(name="batch", version=1)
async def batch(ctx: lf.WorkflowContext, n: int) -> Any:
    return await ctx.effect(settle, n)


async def main(url: str, key: str) -> None:
    async with lf.Engine(url, registry) as engine:
        worker = engine.worker(lease_seconds=LEASE_SECONDS, poll_seconds=0.05)
        running = asyncio.create_task(worker.run())
        started = await engine.start(batch, key=key, input=1)
        result = await engine.result(started.instance_id, timeout=RESULT_TIMEOUT_SECONDS)
        note("zombie.log", {"result": result})
        worker.stop()
        await running


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
