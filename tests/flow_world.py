"""Effects of one rate-limited operation, for the test that runs them on real worker processes
(``flow_world:registry``: this folder is on a worker process's path).

The participant keeps its own log, a file every process appends one line to per call it
receives (when it arrived by the machine's clock, the deadline the call carries, its key and
priority): what "the rate held", "the timeout started at dispatch" and "higher priority went
first" are checked against, whatever the journal says."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import ledgerflow as lf
import ledgerflow.participant

TIMEOUT_SECONDS = 1.0

# Where this process's calls were logged (the lookup reads it back).
LOGS: dict[str, str] = {"calls": os.environ.get("FLOW_WORLD_LOG", "")}

registry = lf.Registry()
api = registry.add_participant(lf.Participant("api"))


@api.effect(classification="compensatable", timeout_seconds=TIMEOUT_SECONDS)
async def send(call: lf.EffectCall) -> dict[str, Any]:
    arrived = time.time()
    line = json.dumps(
        {
            "at": arrived,
            "deadline": call.deadline_at,
            "key": call.idempotency_key,
            "n": call.payload["n"],
            "priority": call.payload.get("priority"),
        }
    )
    fd = os.open(call.payload["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())  # one write under O_APPEND: lines never interleave
    finally:
        os.close(fd)
    return {"n": call.payload["n"]}


@api.lookup
async def find(key: str, attempt: int) -> lf.participant.LookupAnswer:
    """Settles an outcome left UNKNOWN by a worker whose lease lapsed mid-call (a stalled
    process): the participant's log says whether the call arrived."""
    log = LOGS.get("calls")
    if log is not None and os.path.exists(log):
        with open(log, encoding="utf-8") as lines:
            for line in lines:
                call = json.loads(line)
                if call["key"] == key:
                    return lf.participant.LookupAnswer.applied({"n": call["n"]})
    return lf.participant.LookupAnswer.not_applied()


@registry.workflow(name="notify", version=1)
async def notify(ctx: lf.WorkflowContext, job: dict[str, Any]) -> Any:
    return await ctx.effect(send, job, priority=job.get("priority"))
