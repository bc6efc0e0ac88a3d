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
from ledgerflow.model.detection import (
    ADOPTION_REFUSED,
    REPLAY_DIVERGENCE,
    DetectionBounds,
    UnservedCount,
)
from ledgerflow.model.effect import EffectState
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.model.routing import Served
from ledgerflow.runtime.adoption import COMPENSATING_REFUSAL, move_refusal
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


_WHY = {
    REPLAY_DIVERGENCE: (
        "flagged replay_divergence (the journal does not replay against the live code: run a "
        "worker with its code, or `ledgerflow versions upgrade` with a declared migration)"
    ),
    ADOPTION_REFUSED: (
        "flagged adoption_refused (an UNKNOWN effect the live code's replay does not reach: "
        "run a worker with its code, or `ledgerflow repair resolve-effect ID SEQ`)"
    ),
}


def _refusals(store: DetectionStore) -> dict[Served, dict[str, int]]:
    """The open adoption refusals, counted by the pin of their instance and reason."""
    flags = [f for f in store.open_flags() if f.reason_code in _WHY]
    pins = store.get_instances([InstanceId(f.instance_id) for f in flags])
    counted: dict[Served, dict[str, int]] = {}
    for flag in flags:
        record = pins.get(InstanceId(flag.instance_id))
        if record is None:
            continue
        pinned = Served(record.workflow_name, record.workflow_version, record.fingerprint)
        reasons = counted.setdefault(pinned, {})
        reasons[flag.reason_code] = reasons.get(flag.reason_code, 0) + 1
    return counted


def _refused_said(reasons: dict[str, int]) -> str:
    said = [f"{n} {_WHY[code]}" for code, n in sorted(reasons.items())]
    rest = (
        "a worker with other code of this version adopts each other one that comes due if its "
        "journal replays clean (one with an UNKNOWN effect only where the replay reaches it "
        "asking for that very effect, then settled by lookup under the same key; a "
        "compensation under way finishes only on its own code)"
    )
    return "; ".join([*said, rest])


def unserved_task(runtime: Runtime, store: DetectionStore, bounds: DetectionBounds) -> PeriodicTask:
    """The count, as a worker's periodic task: at start, then every scan interval; logged when
    it changes or the adoption refusals among it do (a warning while anything is unserved,
    naming each refusal's reason and what moves it), exported as a gauge."""
    thread, clock, metrics = runtime.store, runtime.clock, runtime.metrics
    said: tuple[dict[Served, int], dict[Served, dict[str, int]]] | None = None

    async def run() -> None:
        nonlocal said
        live_since = clock.now() - bounds.worker_silent_seconds
        counts = await thread.call(store.unserved_counts, live_since=live_since, now=clock.now())
        current = {
            Served(c.workflow_name, c.workflow_version, c.fingerprint): c.instances for c in counts
        }
        if metrics is not None:
            metrics.unserved(current)
        # Said again when the counts change, or the refusals among them (a flag raised).
        refused = await thread.call(_refusals, store) if current else {}
        now_said = (current, {pin: refused[pin] for pin in current if pin in refused})
        if now_said == said or (said is None and not current):
            said = now_said
            return
        said = now_said
        if not counts:
            log.info("no instance is pinned to code that no live worker serves any more")
            return
        live = served_by(await thread.call(store.workers, live_since=live_since))
        for count in counts:
            pinned = Served(count.workflow_name, count.workflow_version, count.fingerprint)
            log.warning(
                "%s: %s; see `ledgerflow versions` and docs/versioning.md",
                _counted(count, live),
                _refused_said(refused.get(pinned, {})),
                extra={"workflow": count.workflow_name, "version": count.workflow_version},
            )

    return PeriodicTask(
        name="unserved", interval_seconds=bounds.scan_interval_seconds, run=run, at_start=True
    )


def unserved_explanation(
    store: DetectionStore, record: InstanceRecord, *, bounds: DetectionBounds, now: float
) -> str | None:
    """Why an instance does not move although workers run: live workers serve other code,
    none its pinned definition, and what moves it (the refusal that keeps it from adoption,
    if one does, and the command that settles it). None when one serves it, when no worker is
    live at all (then the answer is to run one), or when it has ended."""
    if record.status in TERMINAL_STATUSES:
        return None
    live = served_by(store.workers(live_since=now - bounds.worker_silent_seconds))
    pinned = Served(record.workflow_name, record.workflow_version, record.fingerprint)
    if not live or pinned in live:
        return None
    version = (pinned.workflow_name, pinned.workflow_version)
    others = [s for s in live if (s.workflow_name, s.workflow_version) == version]
    upgrade = (
        f"`ledgerflow versions upgrade {record.workflow_name}@{record.workflow_version} "
        "MODULE:REGISTRY`"
    )
    head = f"it is pinned to {pinned.label}, which no live worker serves ({_others(pinned, live)})"
    return f"{head}: {_how_it_moves(store, record, others=bool(others), upgrade=upgrade, now=now)}"


def _how_it_moves(
    store: DetectionStore, record: InstanceRecord, *, others: bool, upgrade: str, now: float
) -> str:
    """The reason it is not adopted (or when it will be) and the command that moves it."""
    flags = {f.reason_code: f for f in store.open_flags(record.instance_id)}
    tail = (
        f"run a worker with its code, or move it with {upgrade} (or a declared migration, "
        "`docs/versioning.md`)"
    )
    if REPLAY_DIVERGENCE in flags:
        return (
            "its journal does not replay against the live workers' code (flagged "
            f"{REPLAY_DIVERGENCE}: see `ledgerflow attention`), so {tail}"
        )
    if ADOPTION_REFUSED in flags:
        evidence = flags[ADOPTION_REFUSED].evidence
        why = evidence.split("not adopted: ", 1)[-1]
        return f"it is not adopted (flagged {ADOPTION_REFUSED}: see `ledgerflow attention`): {why}"
    journal = store.journal(record.instance_id, record.run)
    refusal = move_refusal(record, journal, now=now)
    if refusal == COMPENSATING_REFUSAL:
        return (
            f"it is not adopted: {refusal}, which finishes only on the code that began it, so "
            f"run a worker with its code (`ledgerflow attention` and `ledgerflow show "
            f"{record.instance_id}` show where it stands)"
        )
    if refusal is not None:
        return (
            f"it is not adopted yet: {refusal} (until {record.lease_expires_at}); once that "
            f"lapses a worker with the other code adopts it if its journal replays clean, or {tail}"
        )
    unknown = sorted(
        (e for e in journal.effects.values() if e.state is EffectState.UNKNOWN),
        key=lambda e: e.seq,
    )
    if others and unknown:
        effect = unknown[0]
        return (
            f"it holds UNKNOWN effect {effect.participant}.{effect.operation} at position "
            f"{effect.seq}: a worker with the other code adopts it (and settles that effect by "
            "the participant's lookup, under the same key) only if its replay reaches that "
            "position asking for the very same effect, else flags it adoption_refused; "
            f"settle it yourself with `ledgerflow repair resolve-effect {record.instance_id} "
            f"{effect.seq} --applied|--not-applied --evidence JSON`, or {tail}"
        )
    if others:
        return (
            f"a worker with that other code adopts it once it is due (at {record.available_at}) "
            f"if its journal replays clean (`ledgerflow replay` checks), or {tail}"
        )
    return tail


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
