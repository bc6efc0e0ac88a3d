"""Instances contending for a few durable locks, for the test that SIGKILLs real worker
processes among them (``lock_contention:registry``: this folder is on a worker process's path).

Each critical section is recorded by the participant's own log, a file every process appends
one line to per entry and exit (``enter``/``leave``, the lock, the instance's key): what "never
two holders" is checked against, whatever the journal says."""

from __future__ import annotations

import os
from typing import Any

import ledgerflow as lf

registry = lf.Registry()


def record(log: str, what: str, lock: str, who: str) -> str:
    line = f"{what} {lock} {who}\n".encode()
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write under O_APPEND: lines of processes never interleave
    finally:
        os.close(fd)
    return what


@registry.workflow(name="contend", version=1)
async def contend(ctx: lf.WorkflowContext, job: dict[str, Any]) -> str:
    async with ctx.lock(job["lock"]):
        await ctx.step("enter", record, job["log"], "enter", job["lock"], job["who"])
        await ctx.step("leave", record, job["log"], "leave", job["lock"], job["who"])
    return str(job["who"])
