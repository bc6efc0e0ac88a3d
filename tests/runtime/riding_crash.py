"""A worker process for the riding-steps kill test: two local steps, then an effect, then a
third step; each step appends a line to ``$RIDING_RUNS`` when it runs, the participant a line
to ``$RIDING_APPLIED`` when it applies. Killed by SIGKILL at a named point.

Run as ``python riding_crash.py DB_URL KEY CHECKPOINT`` with ``LEDGERFLOW_FAULTS`` set;
CHECKPOINT ``1`` makes the first step a checkpoint.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import ledgerflow as lf
from ledgerflow.runtime import faults

LEASE_SECONDS = 0.5
RESULT_TIMEOUT_SECONDS = 60.0


def _append(variable: str, line: str) -> None:
    with open(os.environ[variable], "a", encoding="utf-8") as file:
        file.write(line + "\n")


def build(checkpoint_first: bool) -> lf.Registry:
    registry = lf.Registry()
    bank = registry.add_participant(lf.Participant("bank", deduplicates=True))

    @bank.effect(classification="compensatable")
    def charge(call: lf.EffectCall) -> dict[str, Any]:
        # The bank's own book: a key seen before answers its first receipt.
        book = Path(os.environ["RIDING_APPLIED"])
        seen = book.read_text(encoding="utf-8").split() if book.exists() else []
        if call.idempotency_key not in seen:
            _append("RIDING_APPLIED", call.idempotency_key)
        return {"charged": call.payload}

    def counted(name: str, n: int) -> int:
        _append("RIDING_RUNS", name)
        return n + 1

    @registry.workflow(name="riding", version=1)
    async def riding(ctx: lf.WorkflowContext, n: int) -> int:
        a = await ctx.step("first", counted, "first", n, checkpoint=checkpoint_first)
        b = await ctx.step("second", counted, "second", a)
        await ctx.effect(charge, b)
        return int(await ctx.step("third", counted, "third", b))

    return registry


async def main(url: str, key: str, checkpoint_first: bool) -> None:
    faults.install_from_environment()
    async with lf.Engine(url, build(checkpoint_first)) as engine:
        worker = engine.worker(lease_seconds=LEASE_SECONDS, poll_seconds=0.01)
        running = asyncio.create_task(worker.run())
        started = await engine.start("riding", key=key, input=1)
        await engine.result(started.instance_id, timeout=RESULT_TIMEOUT_SECONDS)
        worker.stop()
        await running


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] == "1"))
