"""Work routed by capability: a worker claims only instances pinned to a definition it serves.

Each test runs on SQLite and PostgreSQL. Two services share one journal with disjoint
registries and must never touch each other's instances (the journal's timeline names every
owner that ever claimed an instance); code changed under the same version, or a version a
worker lacks, leaves the instance exactly as it was instead of parking it; an older registered
version can still be started. The mutation test breaks the claim's routing through a seam and
shows that the two-services check catches it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import ledgerflow as lf
from breakages import CLAIM_IGNORES_CAPABILITY, broken
from conditions import until
from ledgerflow.model.detection import DetectionBounds
from ledgerflow.runtime.detection import scan

BOUNDS = DetectionBounds(worker_silent_seconds=5.0, scan_interval_seconds=60.0)
PER_SERVICE = 12


def _service(name: str) -> lf.Registry:
    """A service of its own: a workflow that waits for a signal, and one that only steps."""
    registry = lf.Registry()

    @registry.workflow(name=f"{name}-approval", version=1)
    async def approval(ctx: lf.WorkflowContext, n: int) -> dict[str, Any]:
        signal = await ctx.wait_for("go")
        return {"n": n, "by": signal.payload}

    @registry.workflow(name=f"{name}-sum", version=1)
    async def total(ctx: lf.WorkflowContext, n: int) -> int:
        doubled: int = await ctx.step("double", lambda x: 2 * x, n)
        return doubled

    return registry


def owners(store: Any, instance_id: str) -> set[str]:
    """Every worker that ever claimed the instance, from its timeline."""
    return {
        entry.to_state
        for entry in store.timeline(instance_id)
        if entry.subject == "owner" and entry.detail == "claimed"
    }


async def _two_services(url: str) -> dict[str, Any]:
    """Services A and B on one journal: 12 instances each (a third wait for a signal, sent
    from the other service's engine), both workers running; returns which workers claimed
    what, and how every instance ended."""
    registries = {"a": _service("a"), "b": _service("b")}
    ids: dict[str, list[str]] = {"a": [], "b": []}
    waiting: set[str] = set()
    # Started before any worker runs, interleaved: every claim sees both services' work due.
    starters = {name: lf.SyncEngine(url, registry) for name, registry in registries.items()}
    for n in range(PER_SERVICE):
        for name, starter in starters.items():
            workflow = f"{name}-approval" if n % 3 == 0 else f"{name}-sum"
            instance_id = starter.start(workflow, key=f"{name}-{n}", input=n).instance_id
            ids[name].append(instance_id)
            if workflow.endswith("approval"):
                waiting.add(instance_id)
    for starter in starters.values():
        starter.close()
    engines = {name: lf.Engine(url, registry) for name, registry in registries.items()}
    workers = {
        name: engine.worker(concurrency=8, lease_seconds=2, poll_seconds=0.01, detection=BOUNDS)
        for name, engine in engines.items()
    }
    running = [asyncio.create_task(w.run()) for w in workers.values()]
    try:

        async def all_waiting() -> bool:
            records = [await engines["a"].get(i) for i in waiting]
            return all(r.status is lf.InstanceStatus.WAITING for r in records)

        await until(all_waiting, what="the approvals wait for their signal")
        for name, other in (("a", "b"), ("b", "a")):
            for instance_id in ids[name]:
                if instance_id in waiting:
                    await engines[other].signal(
                        instance_id, "go", event_id=f"go-{instance_id}", payload=other
                    )
        for name, engine in engines.items():
            for instance_id in ids[name]:
                await engine.wait(instance_id, timeout=30)
        store = engines["a"].store
        return {
            "workers": {name: w.id for name, w in workers.items()},
            "owners": {name: {i: owners(store, i) for i in ids[name]} for name in ids},
            "statuses": {(await engines["a"].get(i)).status for name in ids for i in ids[name]},
        }
    finally:
        for worker in workers.values():
            worker.stop()
        await asyncio.gather(*running)
        for engine in engines.values():
            await engine.close()


def _assert_disjoint(seen: dict[str, Any]) -> None:
    workers = seen["workers"]
    for name, by_instance in seen["owners"].items():
        for instance_id, claimed_by in by_instance.items():
            assert claimed_by == {workers[name]}, (instance_id, claimed_by)
    assert seen["statuses"] == {lf.InstanceStatus.SUCCEEDED}


def test_two_services_on_one_journal_never_touch_each_others_instances(journal_url: str) -> None:
    """Goal: with disjoint registries on one journal, each worker claims only its own service's
    instances; nothing is parked and every instance succeeds.

    Method: two services start 12 instances each on one journal (a third wait for a signal,
    sent from the other service's engine), then a worker per service runs them; every
    instance's timeline names the owners that ever claimed it: only its own service's worker.
    """
    _assert_disjoint(asyncio.run(_two_services(journal_url)))


def test_a_claim_that_ignores_capability_is_caught(journal_url: str) -> None:
    """Goal (mutation): the two-services check is not vacuous.

    Method: the same run with the claim's routing broken through a seam (it takes any
    definition); the foreign worker gives each instance back untouched, so every instance
    still succeeds, but the timelines show a worker that claimed another service's instance.
    """
    with broken(CLAIM_IGNORES_CAPABILITY):
        seen = asyncio.run(_two_services(journal_url))
    with pytest.raises(AssertionError):
        _assert_disjoint(seen)
    assert seen["statuses"] == {lf.InstanceStatus.SUCCEEDED}


def _drift(url: str, edited: bool) -> tuple[str, lf.Registry]:
    """Start an instance of ``drift`` v1 and return it with a registry that lacks its code:
    v1 edited (another fingerprint) or only a v2."""
    old = lf.Registry()

    @old.workflow(name="drift", version=1)
    async def drift_v1(ctx: lf.WorkflowContext, n: int) -> int:
        return n

    new = lf.Registry()
    if edited:
        # Pinned: this code leaves the old fingerprint's instances to an operator (adoption,
        # the default, is tests/versioning/test_adoption.py's).
        @new.workflow(name="drift", version=1, on_new_code="pinned")
        async def drift_v1_edited(ctx: lf.WorkflowContext, n: int) -> int:
            return n + 1

    else:

        @new.workflow(name="drift", version=2)
        async def drift_v2(ctx: lf.WorkflowContext, n: int) -> int:
            return n + 2

    with lf.SyncEngine(url, old) as engine:
        return engine.start("drift", key="d-1", input=1).instance_id, new


@pytest.mark.parametrize("edited", [True, False], ids=["fingerprint-changed", "version-missing"])
def test_a_worker_without_the_pinned_code_leaves_the_instance_untouched(
    journal_url: str, edited: bool
) -> None:
    """Goal: a worker whose code for the pinned version changed (another fingerprint, declared
    ``on_new_code="pinned"``), or that has another version only, neither runs nor parks the
    instance: it never claims it.

    Method: start under v1, run a worker with the other registry until idle (it must return:
    nothing it serves is due), then read the instance: RUNNING, never owned, generation 0.
    """
    instance_id, other = _drift(journal_url, edited)

    async def main() -> lf.InstanceRecord:
        async with lf.Engine(journal_url, other) as engine:
            await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)
            return await engine.get(instance_id)

    record = asyncio.run(main())
    assert record.status is lf.InstanceStatus.RUNNING
    assert (record.owner, record.generation, record.reason_code) == (None, 0, None)


def test_an_older_registered_version_can_be_started(journal_url: str) -> None:
    """Goal: ``engine.start(..., version=N)`` pins the instance to that older version, and a
    worker serving both runs each instance on the code it is pinned to.

    Method: one registry with v1 and v2 of a workflow; start one of each; both succeed with
    their own version's result.
    """
    registry = lf.Registry()

    @registry.workflow(name="greet", version=1)
    async def greet_v1(ctx: lf.WorkflowContext, name: str) -> str:
        return f"hello {name}"

    @registry.workflow(name="greet", version=2)
    async def greet_v2(ctx: lf.WorkflowContext, name: str) -> str:
        return f"hi {name}"

    async def main() -> list[Any]:
        async with lf.Engine(journal_url, registry) as engine:
            old = await engine.start("greet", key="old", input="ada", version=1)
            new = await engine.start("greet", key="new", input="ada")
            assert (old.instance.workflow_version, new.instance.workflow_version) == (1, 2)
            await engine.worker(lease_seconds=1, poll_seconds=0.01).run(until_idle=True)
            return [await engine.result(i, timeout=5) for i in (old.instance_id, new.instance_id)]

    assert asyncio.run(main()) == ["hello ada", "hi ada"]


def test_a_worker_registers_beats_and_signs_off(journal_url: str) -> None:
    """Goal: a running worker is in the registry as live, with its slots and every definition
    its registry serves; a clean stop signs it off at once.

    Method: run a worker of a registry with two versions; read the live workers while it
    runs, then after stop (its row says stopped, and it is no longer live).
    """
    registry = _service("a")

    async def main() -> None:
        async with lf.Engine(journal_url, registry) as engine:
            worker = engine.worker(concurrency=5, poll_seconds=0.01, detection=BOUNDS)
            running = asyncio.create_task(worker.run())

            def live() -> list[Any]:
                return engine.store.workers(live_since=time.time() - 5)

            [seen] = await until(live, what="the worker is registered")
            assert (seen.worker_id, seen.slots, seen.serves) == (worker.id, 5, registry.served())
            assert seen.stopped_at is None
            worker.stop()
            await running
            assert live() == []
            [gone] = engine.store.workers(live_since=None)
            assert gone.stopped_at is not None

    asyncio.run(main())


def test_a_start_no_live_worker_serves_succeeds_and_is_flagged(journal_url: str) -> None:
    """Goal: starting a version no live worker serves is not refused; once due past the bound,
    the scan flags it no_capable_worker with the definition and fingerprint, and a worker
    serving it clears the flag by running it.

    Method: a worker serving only v1 runs; start v2 (the registry of the starter has both);
    scan at a time past the bound; then run a worker with both versions and scan again.
    """
    both = lf.Registry()

    @both.workflow(name="greet", version=1)
    async def greet_v1(ctx: lf.WorkflowContext, name: str) -> str:
        return f"hello {name}"

    @both.workflow(name="greet", version=2)
    async def greet_v2(ctx: lf.WorkflowContext, name: str) -> str:
        return f"hi {name}"

    only_v1 = lf.Registry()
    only_v1.workflow(name="greet", version=1)(greet_v1)
    bounds = DetectionBounds(unserved_after_seconds=60, worker_silent_seconds=300)

    async def main() -> None:
        async with lf.Engine(journal_url, only_v1) as engine:
            worker = engine.worker(poll_seconds=0.01, detection=bounds)
            running = asyncio.create_task(worker.run())
            await until(
                lambda: engine.store.workers(live_since=time.time() - 5), what="a live worker"
            )
            with lf.SyncEngine(journal_url, both) as starter:
                started = starter.start("greet", key="g", input="ada")
            assert started.instance.workflow_version == 2
            report = scan(engine.store, bounds, now=time.time() + 61)
            [finding] = report.raised
            assert finding.reason_code == "no_capable_worker"
            assert f"greet v2 (fingerprint {started.instance.fingerprint})" in finding.evidence
            assert "live workers serve only greet v1" in finding.evidence
            record = await engine.get(started.instance_id)
            assert (record.status, record.owner, record.generation) == (
                lf.InstanceStatus.RUNNING,
                None,
                0,
            )
            worker.stop()
            await running
        async with lf.Engine(journal_url, both) as engine:
            await engine.worker(poll_seconds=0.01, detection=bounds).run(until_idle=True)
            assert await engine.result(started.instance_id, timeout=5) == "hi ada"
            assert scan(engine.store, bounds, now=time.time() + 61).cleared == (
                (started.instance_id, "no_capable_worker"),
            )

    asyncio.run(main())
