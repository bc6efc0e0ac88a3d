"""Nothing waits in silence: instances pinned to code that no live worker serves are said
aloud (internal).

Routing by capability never hands an instance to a worker without its code, and adoption
(:mod:`ledgerflow.runtime.adoption`) takes over what replays clean as it comes due. What is
left (pinned to code nobody runs, waiting for its timer or for a worker that may never come)
is reported here, so that a deploy that strands work is seen at once:

- every worker counts such instances per (workflow, version, fingerprint) as it starts and at
  every scan interval, logs the counts whenever they change, and exports them as the gauge
  ``ledgerflow_instances_unserved``;
- :func:`unserved_explanation` says, for one instance, what a waiter needs to hear instead of
  "no worker is running": the fingerprint it is pinned to, what the live workers serve, and how
  it moves (``Engine.result``, ``ledgerflow result``).
"""

from __future__ import annotations

import logging
import time

from ledgerflow.errors import NoCapableWorkerError, ResultTimeoutError
from ledgerflow.ledger.records import InstanceRecord
from ledgerflow.ledger.workers import served_by
from ledgerflow.model.detection import REPLAY_DIVERGENCE, DetectionBounds, UnservedCount
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.model.routing import Served
from ledgerflow.runtime.detection import bounds_from_environment
from ledgerflow.runtime.periodic import PeriodicTask
from ledgerflow.runtime.seams import Runtime
from ledgerflow.storage.store import DetectionStore

log = logging.getLogger("ledgerflow.worker")


def _others(pinned: Served, live: list[Served]) -> str:
    same = sorted(s for s in live if s.workflow_name == pinned.workflow_name)
    if same:
        return "live workers serve " + ", ".join(s.label for s in same)
    if live:
        return f"no live worker serves any version of {pinned.workflow_name}"
    return "no worker is live"


def _counted(count: UnservedCount, live: list[Served]) -> str:
    pinned = Served(count.workflow_name, count.workflow_version, count.fingerprint)
    return (
        f"{count.instances} instance(s) ({count.due} due) pinned to {pinned.label}, which no "
        f"live worker serves ({_others(pinned, live)})"
    )


def unserved_task(runtime: Runtime, store: DetectionStore, bounds: DetectionBounds) -> PeriodicTask:
    """The count, as a worker's periodic task: at start, then every scan interval; logged when
    it changes (a warning while anything is unserved), exported as a gauge."""
    thread, clock, metrics = runtime.store, runtime.clock, runtime.metrics
    said: dict[Served, int] | None = None

    async def run() -> None:
        nonlocal said
        live_since = clock.now() - bounds.worker_silent_seconds
        counts = await thread.call(store.unserved_counts, live_since=live_since, now=clock.now())
        current = {
            Served(c.workflow_name, c.workflow_version, c.fingerprint): c.instances for c in counts
        }
        if metrics is not None:
            metrics.unserved(current)
        if current == said or (said is None and not current):
            said = current
            return
        said = current
        if not counts:
            log.info("no instance is pinned to code that no live worker serves any more")
            return
        live = served_by(await thread.call(store.workers, live_since=live_since))
        for count in counts:
            log.warning(
                "%s: a worker with other code of this version adopts each as it comes due if "
                "its journal replays clean; see `ledgerflow versions` and docs/versioning.md",
                _counted(count, live),
                extra={"workflow": count.workflow_name, "version": count.workflow_version},
            )

    return PeriodicTask(
        name="unserved", interval_seconds=bounds.scan_interval_seconds, run=run, at_start=True
    )


def unserved_explanation(
    store: DetectionStore, record: InstanceRecord, *, bounds: DetectionBounds, now: float
) -> str | None:
    """Why an instance does not move although workers run: live workers serve other code,
    none its pinned definition. None when one serves it, when no worker is live at all (then
    the answer is to run one), or when it has ended."""
    if record.status in TERMINAL_STATUSES:
        return None
    live = served_by(store.workers(live_since=now - bounds.worker_silent_seconds))
    pinned = Served(record.workflow_name, record.workflow_version, record.fingerprint)
    if not live or pinned in live:
        return None
    version = (pinned.workflow_name, pinned.workflow_version)
    others = [s for s in live if (s.workflow_name, s.workflow_version) == version]
    diverged = [
        f for f in store.open_flags(record.instance_id) if f.reason_code == REPLAY_DIVERGENCE
    ]
    if diverged:
        move = (
            "its journal does not replay against the live workers' code (flagged "
            f"{REPLAY_DIVERGENCE}: see `ledgerflow attention`), so "
        )
    elif others:
        move = (
            "a worker with that other code adopts it when it comes due if its journal replays "
            "clean (`ledgerflow replay` checks), or "
        )
    else:
        move = ""
    return (
        f"it is pinned to {pinned.label}, which no live worker serves "
        f"({_others(pinned, live)}): {move}run a worker with its code, or move it with "
        f"`ledgerflow versions upgrade {record.workflow_name}@{record.workflow_version} "
        "MODULE:REGISTRY` (or a declared migration, `docs/versioning.md`)"
    )


# Said when a wait times out and no worker of this engine drives anything: the first thing a
# newcomer needs to know is that starting an instance does not run it. Each engine says how to
# run one where it is (an ``Engine`` in its own process; a ``SyncEngine`` drives nothing); a
# face that knows its user better (the command line) gives its own words instead, as the
# engine's ``no_worker_hint``: the runtime never knows which face waits.
NO_WORKER_HINT = (
    "no worker of this engine is running, and an instance only moves while a worker drives "
    "it: run one in this process (asyncio.create_task(engine.worker().run())) or in another "
    "(ledgerflow worker MODULE:OBJECT --db URL)"
)
NO_WORKER_HINT_SYNC = (
    "no worker runs in this process (a SyncEngine drives nothing), and an instance only moves "
    "while a worker drives it: run one in another (ledgerflow worker MODULE:OBJECT --db URL), "
    "or an Engine's worker"
)


def timed_out(
    error: ResultTimeoutError, *, why: str | None, workers: bool, hint: str = NO_WORKER_HINT
) -> ResultTimeoutError:
    """What a waiter that gave up is told: that no live worker serves the instance's pinned
    code (``why``, see :func:`~ledgerflow.runtime.unserved.unserved_explanation`), or that no
    worker runs here and ``hint`` (how to run one), or just that time ran out."""
    if why is not None:
        return NoCapableWorkerError(f"{error.message}; {why}", instance_id=error.instance_id)
    if workers:
        return error
    return ResultTimeoutError(f"{error.message}; {hint}", instance_id=error.instance_id)


def why_unserved(store: DetectionStore, record: InstanceRecord) -> str | None:
    """:func:`unserved_explanation` now, with the bounds the environment sets."""
    bounds = bounds_from_environment()
    return unserved_explanation(store, record, bounds=bounds, now=time.time())
