"""Flow control on effects: the rate achieved against the rate configured, across workers.

    python bench/flow_control.py --quick                  # 60 effects, 10/s, burst 5, 3 workers
    python bench/flow_control.py                          # 1,000 effects (about 100 s)
    python bench/flow_control.py --db postgresql://postgres@127.0.0.1:5432/bench --workers 3

N effects of one operation limited to ``--rate`` per second with ``--burst`` are started, then
``--workers`` real worker processes (``--role worker``) drive them at once. The participant
logs when each call reached it (one line per call, appended by whichever process made it).
Printed (last line of stdout, JSON): the configured rate and burst, the achieved rate after
the burst by the store's admissions and by the participant's log, the most calls the
participant saw in any one second, how long effects waited THROTTLED (p50, p99, max), and how
many timed out (the effect's timeout is far shorter than the longest wait).
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
from ledgerflow.model.flow import admissions_over_rate
from ledgerflow.model.ids import InstanceId

TIMEOUT_SECONDS = 1.0

registry = lf.Registry()
api = registry.add_participant(lf.Participant("api"))


@api.effect(classification="compensatable", timeout_seconds=TIMEOUT_SECONDS)
async def send(call: lf.EffectCall) -> dict[str, Any]:
    line = json.dumps({"at": time.time(), "key": call.idempotency_key}) + "\n"
    fd = os.open(call.payload["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return {"n": call.payload["n"]}


@registry.workflow(name="notify", version=1)
async def notify(ctx: lf.WorkflowContext, job: dict[str, Any]) -> Any:
    return await ctx.effect(send, job)


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
        began = time.perf_counter()
        command = [sys.executable, __file__, "--role", "worker", "--db", db]
        for _ in range(3):  # a worker that found nothing due may leave early: start them again
            procs = [subprocess.Popen(command) for _ in range(workers)]
            codes = [p.wait() for p in procs]
            if codes != [0] * workers:
                raise SystemExit(f"a worker failed: {codes}")
            if all(outside.get(i).status is lf.InstanceStatus.SUCCEEDED for i in ids):
                break
        seconds = time.perf_counter() - began
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["bench", "worker"], default="bench")
    parser.add_argument("--db", default=None, help="store URL (default: a fresh SQLite file)")
    parser.add_argument("--effects", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=5)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="60 effects")
    args = parser.parse_args()
    if args.role == "worker":
        _worker(args.db)
        return
    with tempfile.TemporaryDirectory() as folder:
        db = args.db or f"sqlite:///{folder}/journal.db"
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
