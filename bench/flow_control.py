"""Flow control on effects: the rate achieved against the rate configured, across workers.

    python bench/flow_control.py --quick                  # 60 effects, 10/s, burst 5, 3 workers
    python bench/flow_control.py                          # 1,000 effects (about 100 s)
    python bench/flow_control.py --db postgresql://postgres@127.0.0.1:5432/bench --workers 3
    python bench/flow_control.py --figure order --quick   # priority and fairness, 216 effects

N effects of one operation limited to ``--rate`` per second with ``--burst`` are started, then
``--workers`` real worker processes (``--role worker``) drive them at once. The participant
logs when each call reached it (one line per call, appended by whichever process made it).
Printed (last line of stdout, JSON): the configured rate and burst, the achieved rate after
the burst by the store's admissions and by the participant's log, the most calls the
participant saw in any one second, how long effects waited THROTTLED (p50, p99, max), and how
many timed out (the effect's timeout is far shorter than the longest wait).

``--figure order`` measures the order of admissions instead, two limits driven at once by the
same workers: one operation shared by three tenants of unequal backlog, fair by tenant with
weights (share of admissions per tenant while all three wait, against the weights' share),
and one with effects at priorities 1, 3 and 5 (p50 and p99 THROTTLED wait per priority).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ledgerflow as lf
from ledgerflow.model.flow import Admission, admissions_over_rate
from ledgerflow.model.ids import InstanceId
from ledgerflow.testing.flow_checks import flows_held

TIMEOUT_SECONDS = 1.0

registry = lf.Registry()
api = registry.add_participant(lf.Participant("api"))


@api.effect(classification="compensatable", timeout_seconds=TIMEOUT_SECONDS)
async def send(call: lf.EffectCall) -> dict[str, Any]:
    return await _log_call(call)


async def _log_call(call: lf.EffectCall) -> dict[str, Any]:
    line = json.dumps({"at": time.time(), "key": call.idempotency_key}) + "\n"
    fd = os.open(call.payload["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return {"n": call.payload["n"]}


@api.effect("push", classification="compensatable", timeout_seconds=TIMEOUT_SECONDS)
async def push(call: lf.EffectCall) -> dict[str, Any]:
    return await _log_call(call)


@registry.workflow(name="notify", version=1)
async def notify(ctx: lf.WorkflowContext, job: dict[str, Any]) -> Any:
    return await ctx.effect(send, job)


@registry.workflow(name="urgent", version=1)
async def urgent(ctx: lf.WorkflowContext, job: dict[str, Any]) -> Any:
    return await ctx.effect(push, job, priority=job["priority"])


# --figure order: backlog and weight per tenant (fairness), effects per priority.
FAIR_TENANTS = {"big": (80, 1.0), "mid": (40, 2.0), "small": (16, 1.0)}
PRIORITIES = {1: 40, 3: 20, 5: 20}


def _worker(db: str) -> None:
    async def main() -> None:
        async with lf.Engine(db, registry) as engine:
            await engine.worker(poll_seconds=0.02).run(until_idle=True)

    asyncio.run(main())


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def _most_in_one_second(times: list[float]) -> int:
    ordered, most, first = sorted(times), 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


def _after_burst(times: list[float], burst: int) -> float:
    ordered = sorted(times)
    span = ordered[-1] - ordered[burst - 1] if len(ordered) > burst else 0.0
    return (len(ordered) - burst) / span if span > 0 else 0.0


def run(
    db: str, *, effects: int, rate: float, burst: int, workers: int, log: Path
) -> dict[str, Any]:
    with lf.SyncEngine(db, registry) as outside:
        outside.limit_effect("api", "send", rate_per_second=rate, burst=burst, per="tenant")
        print(f"starting {effects} effects", file=sys.stderr)
        ids = [
            outside.start(
                "notify", key=f"n{n}", input={"n": n, "log": str(log)}, tenant="acme"
            ).instance_id
            for n in range(effects)
        ]
        seconds = _drive(db, workers, ids, outside)
        succeeded = sum(outside.get(i).status is lf.InstanceStatus.SUCCEEDED for i in ids)
        admissions = outside.store.flow_admissions()
        admitted = [a.admitted_at for a in admissions if a.admitted_at is not None]
        timed_out = sum(
            1
            for i in ids
            for t in outside.store.timeline(InstanceId(i))
            if t.to_state == "UNKNOWN" and "DeadlinePassed" in (t.detail or "")
        )
    arrived = [json.loads(line)["at"] for line in log.read_text().splitlines()]
    waits = [a.throttled_seconds for a in admissions]
    return {
        "configured": {"rate_per_second": rate, "burst": burst},
        "effects": effects,
        "workers": workers,
        "store": db.split(":", 1)[0],
        "succeeded": succeeded,
        "seconds": round(seconds, 2),
        "achieved_rate_after_burst": {
            "admissions": round(_after_burst(admitted, burst), 3),
            "participant_log": round(_after_burst(arrived, burst), 3),
        },
        "most_calls_in_one_second": {
            "participant_log": _most_in_one_second(arrived),
            "allowed": burst + int(rate),
        },
        # None when the rate held; else the first window over it: (count, start, end).
        "admissions_over_rate": admissions_over_rate(admitted, rate_per_second=rate, burst=burst),
        "throttled_seconds": {
            "p50": round(statistics.median(waits), 3) if waits else 0.0,
            "p99": round(_percentile(waits, 0.99), 3),
            "max": round(max(waits, default=0.0), 3),
        },
        "effect_timeout_seconds": TIMEOUT_SECONDS,
        "timed_out": timed_out,
    }


def _drive(db: str, workers: int, ids: list[str], outside: lf.SyncEngine) -> float:
    began = time.perf_counter()
    command = [sys.executable, __file__, "--role", "worker", "--db", db]
    for _ in range(3):  # a worker that found nothing due may leave early: start them again
        procs = [subprocess.Popen(command) for _ in range(workers)]
        codes = [p.wait() for p in procs]
        if codes != [0] * workers:
            raise SystemExit(f"a worker failed: {codes}")
        if all(outside.get(i).status is lf.InstanceStatus.SUCCEEDED for i in ids):
            break
    return time.perf_counter() - began


def _first_ask(a: Admission) -> float:
    return float(a.throttled_since if a.throttled_since is not None else a.admitted_at or 0.0)


def _start_order(outside: lf.SyncEngine, *, scale: int, log: Path) -> list[str]:
    ids, n = [], 0
    for tenant, (count, _) in FAIR_TENANTS.items():
        for _ in range(count * scale):
            job = {"n": n, "log": str(log)}
            ids.append(outside.start("notify", key=f"n{n}", input=job, tenant=tenant))
            n += 1
    for priority, count in PRIORITIES.items():
        for _ in range(count * scale):
            job = {"n": n, "log": str(log), "priority": priority}
            ids.append(outside.start("urgent", key=f"n{n}", input=job))
            n += 1
    return [i.instance_id for i in ids]


def _shares(fair: list[Admission], weights: dict[str, float]) -> dict[str, Any]:
    """Admissions per tenant in the window in which every tenant had waiters: from the last
    one's first ask to the first one's last admission."""
    start = max(min(_first_ask(a) for a in fair if a.fairness_key == t) for t in weights)
    end = min(max(a.admitted_at or 0.0 for a in fair if a.fairness_key == t) for t in weights)
    inside = [a for a in fair if a.admitted_at is not None and start <= a.admitted_at <= end]
    total = sum(weights.values())
    counts = {t: sum(a.fairness_key == t for a in inside) for t in weights}
    return {
        "window_seconds": round(end - start, 3),
        "admissions_in_window": len(inside),
        "per_tenant": {
            t: {
                "admitted": counts[t],
                "share": round(counts[t] / max(1, len(inside)), 3),
                "weight_share": round(w / total, 3),
            }
            for t, w in weights.items()
        },
    }


def run_order(db: str, *, rate: float, workers: int, scale: int, log: Path) -> dict[str, Any]:
    """Both order figures at once (see module)."""
    weights = {t: w for t, (_, w) in FAIR_TENANTS.items()}
    with lf.SyncEngine(db, registry) as outside:
        outside.limit_effect("api", "send", rate_per_second=rate, fair_by="tenant",
                             weights=weights)  # fmt: skip
        outside.limit_effect("api", "push", rate_per_second=rate)
        ids = _start_order(outside, scale=scale, log=log)
        seconds = _drive(db, workers, ids, outside)
        succeeded = sum(outside.get(i).status is lf.InstanceStatus.SUCCEEDED for i in ids)
        fair = outside.store.flow_admissions(scope="effect:api.send")
        ranked = outside.store.flow_admissions(scope="effect:api.push")
    waits = {p: sorted(a.throttled_seconds for a in ranked if a.priority == p) for p in PRIORITIES}
    return {
        "figure": "order",
        "store": db.split(":", 1)[0],
        "workers": workers,
        "rate_per_second": rate,
        "effects": len(ids),
        "succeeded": succeeded,
        "seconds": round(seconds, 2),
        "fairness": {
            "backlog": {t: c * scale for t, (c, _) in FAIR_TENANTS.items()},
            **_shares(fair, weights),
        },
        "priority": {
            str(p): {
                "effects": len(w),
                "throttled_p50": round(statistics.median(w), 3) if w else 0.0,
                "throttled_p99": round(_percentile(w, 0.99), 3),
            }
            for p, w in waits.items()
        },
        "oracle_violations": sorted({v.invariant for v in flows_held([*fair, *ranked])}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["bench", "worker"], default="bench")
    parser.add_argument("--db", default=None, help="store URL (default: a fresh SQLite file)")
    parser.add_argument("--effects", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=5)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="60 effects (order: 216)")
    parser.add_argument("--figure", choices=["rate", "order"], default="rate")
    args = parser.parse_args()
    if args.role == "worker":
        _worker(args.db)
        return
    with tempfile.TemporaryDirectory() as folder:
        db = args.db or f"sqlite:///{folder}/journal.db"
        if args.figure == "order":
            rate = 20.0 if args.rate == 10.0 else args.rate
            scale = 1 if args.quick else 4
            found = run_order(db, rate=rate, workers=args.workers, scale=scale,
                              log=Path(folder) / "calls.log")  # fmt: skip
            print(json.dumps(found))
            return
        effects = 60 if args.quick else args.effects
        result = run(
            db,
            effects=effects,
            rate=args.rate,
            burst=args.burst,
            workers=args.workers,
            log=Path(folder) / "calls.log",
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
