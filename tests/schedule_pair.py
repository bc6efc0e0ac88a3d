"""Two schedules that fire every second, for the tests that SIGKILL a real worker process at
each statement of a firing and race five worker processes on their slots
(``schedule_pair:registry``: this folder is on a worker process's path). One is allow_all,
one skip (its overlap watched), so a tick's batch holds both kinds of decision."""

from __future__ import annotations

from typing import Any

import ledgerflow as lf

registry = lf.Registry()


@registry.workflow(name="beat", version=1)
async def beat(ctx: lf.WorkflowContext, payload: Any) -> str | None:
    """Return the slot's nominal instant, so each instance names the slot it fired for."""
    by = ctx.scheduled
    return None if by is None or by.nominal_at is None else by.nominal_at.isoformat()


registry.schedule("heartbeat", workflow=beat, every=1, overlap="allow_all")
registry.schedule("pulse", workflow=beat, every=1, overlap="skip")
