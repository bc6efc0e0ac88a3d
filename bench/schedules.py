"""Schedules benchmark: slots fired per second, and their lateness, with three workers racing.

``--schedules`` schedules fire every second (overlap ``allow_all``, so every slot fires) on
one fresh journal (SQLite by default, PostgreSQL with ``--postgres URL``). Three engines
(``--workers``), as three workers would, each tick the schedules in a loop on the real clock
(the database's, on PostgreSQL) for ``--seconds``; they race on every slot and the losers'
ticks roll back. The figures come from the journal's own rows afterwards: slots decided and
fired per second, lateness (decision time minus due time, of the slots due once the ticking
started) p50 / p99 / max, ticks lost to
another worker, and whether each slot has exactly one row (the oracle's check).

Progress goes to stderr; the last line of stdout is one JSON object with the figures.

    python bench/schedules.py                      # 50 schedules, 10 s, 3 workers
    python bench/schedules.py --quick              # 20 schedules, 4 s
    python bench/schedules.py --postgres postgresql://postgres@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from typing import Any

import ledgerflow as lf
from ledgerflow.ledger.schedules import SlotOutcome
from ledgerflow.testing import oracle


def _registry(schedules: int) -> lf.Registry:
    registry = lf.Registry()

    @registry.workflow(name="beat", version=1)
    async def beat(ctx: lf.WorkflowContext, payload: Any) -> None:
        return None

    for n in range(schedules):
        registry.schedule(f"s{n:03d}", workflow=beat, every=1, overlap="allow_all")
    return registry


async def _run(url: str, *, schedules: int, seconds: float, workers: int) -> dict[str, Any]:
    registry = _registry(schedules)
    engines = [lf.Engine(url, registry) for _ in range(workers)]
    await engines[0].tick_schedules()  # declares them all
    started = time.time()
    lost = 0

    async def loop(engine: lf.Engine) -> None:
        nonlocal lost
        while time.time() - started < seconds:
            report = await engine.tick_schedules()
            lost += report.lost
            await asyncio.sleep(0.05)

    await asyncio.gather(*(loop(e) for e in engines))
    elapsed = time.time() - started
    store = engines[0].store
    slots = [s for r in store.schedules() for s in store.schedule_slots(r.name, limit=10**6)]
    fired = [s for s in slots if s.outcome is SlotOutcome.FIRED]
    # Slots due from the measured start on: the first slots, due while the schedules were
    # being declared, measure the declaration, not the ticks.
    lateness = sorted(s.lateness for s in slots if s.nominal_at >= started)
    violations = oracle.one_firing_per_slot(store)
    for engine in engines:
        await engine.close()
    quantiles = statistics.quantiles(lateness, n=100) if len(lateness) > 1 else [0.0] * 99
    return {
        "backend": url.split(":", 1)[0],
        "schedules": schedules,
        "workers": workers,
        "seconds": round(elapsed, 2),
        "slots_decided": len(slots),
        "slots_fired": len(fired),
        "fired_per_second": round(len(fired) / elapsed, 1),
        "lateness_p50_ms": round(quantiles[49] * 1000, 1),
        "lateness_p99_ms": round(quantiles[98] * 1000, 1),
        "lateness_max_ms": round(max(lateness, default=0.0) * 1000, 1),
        "ticks_lost": lost,
        "one_row_per_slot": violations == [],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--postgres", help="a PostgreSQL URL of an empty database")
    parser.add_argument("--schedules", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.schedules, args.seconds = 20, 4.0
    with tempfile.TemporaryDirectory() as folder:
        url = args.postgres or f"sqlite:///{folder}/journal.db"
        print(f"{args.schedules} schedules, {args.workers} workers, {args.seconds}s on {url}",
              file=sys.stderr)  # fmt: skip
        figures = asyncio.run(
            _run(url, schedules=args.schedules, seconds=args.seconds, workers=args.workers)
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
