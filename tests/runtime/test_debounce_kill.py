"""SIGKILL the process making a debounced start, just before and just after that start's
transaction commits (issue 27): the pending instance holds the earlier input or the later one,
never a half of each; the caller's retry collapses into it; one run, with the later input.

``debounce_crash.py`` starts the key with input 1, then dies at ``start.before_commit`` or
``start.after_commit`` of its second start (input 2). Here the caller asks again (a SyncEngine,
real time), and a worker on a fake clock far ahead of the window runs the instance.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from debounce_crash import WINDOW, registry

import ledgerflow as lf
from ledgerflow.model.codec import JSON
from ledgerflow.testing import FakeClock
from ledgerflow.testing.debounce_checks import debounce_held
from processes import killed_script

KEY = "d-1"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("point", "held"), [("start.before_commit", 1), ("start.after_commit", 2)])
def test_a_process_killed_around_a_debounced_start_keeps_one_input_and_one_run(
    journal_url: str, point: str, held: int
) -> None:
    """Goal: dead before the second start's commit, the instance holds input 1 and one
    timeline line of the window; dead after it, input 2 and two lines; either way the retry
    answers debounced, and the one run takes input 2; the oracle's debounce checks hold."""
    rule = {"point": point, "action": "kill", "match": {"instance": KEY, "kind": "start"}}
    killed_script(Path(__file__).parent / "debounce_crash.py", journal_url, KEY, rules=[rule])
    with lf.SyncEngine(journal_url, registry) as caller:
        [pending] = caller.list(limit=5)
        assert pending.status is lf.InstanceStatus.SCHEDULED
        assert JSON.decode(pending.input) == held
        lines = [e for e in caller.detail(pending.instance_id).timeline if e.subject == "debounce"]
        assert len(lines) == held
        retried = caller.start("reindex", key=KEY, input=2, **WINDOW)  # type: ignore[arg-type]
        assert (retried.created, retried.debounced) == (False, True)

    async def recover() -> None:
        clock = FakeClock(autojump=False)  # its time is past any real window's end
        async with lf.Engine(journal_url, registry, clock=clock) as engine:
            await engine.worker(lease_seconds=5, poll_seconds=0.01).run(until_nothing_due=True)
            iid = str(pending.instance_id)
            assert await engine.result(iid, timeout=10) == 2
            detail = await engine.detail(iid)
            timeline = detail.timeline
            assert [e.to_state for e in timeline if e.subject == "instance"].count("RUNNING") == 1
            seen = {detail.instance.instance_id: JSON.encode(2)}
            events = {detail.instance.instance_id: timeline}
            assert list(debounce_held([detail.instance], events, seen)) == []

    asyncio.run(recover())
