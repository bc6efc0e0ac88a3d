"""Chaos benchmark: worker processes on PostgreSQL killed and paused while orders run.

The long version of ``tests/chaos/test_chaos.py``, with the same machinery (loaded from
``tests/chaos/chaos_harness.py``): a participant service process (inventory with a lookup, payment
deduplicating, shipping both), ``--workers`` ``ledgerflow worker`` processes (lease 2 s,
concurrency 16) on a fresh schema, ``--orders`` orders started from this process spread over
``--start-seconds``, while a driver with a seeded RNG SIGKILLs a random worker every
``--kill-every`` seconds and restarts it, and SIGSTOPs the worker holding the most leases for
``--stop-seconds`` (past its lease) up to ``--stops`` times, then SIGCONTs it. The chaos stops
when every instance is terminal (or after ``--timeout``). The verdict compares the engine's
ledger with each participant's own record of applications.

Progress goes to stderr; the last line of stdout is one JSON object: orders, kills, stops,
stale writes rejected (worker log lines "lost ownership of ..." / "lease of ... lost"),
duplicates, lost completions, seconds.

    LEDGERFLOW_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test python bench/chaos.py
    python bench/chaos.py --postgres-url postgresql://... --orders 500 --workers 4 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "chaos"))


def _machinery():  # type: ignore[no-untyped-def]
    import chaos_harness

    return chaos_harness


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres-url", default=os.environ.get("LEDGERFLOW_TEST_POSTGRES_URL"))
    parser.add_argument("--orders", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--start-seconds", type=float, default=30.0)
    parser.add_argument("--kill-every", type=float, default=3.0)
    parser.add_argument("--stop-seconds", type=float, default=5.0)
    parser.add_argument("--stops", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    if not args.postgres_url:
        parser.error("give --postgres-url or set LEDGERFLOW_TEST_POSTGRES_URL")
    os.environ["LEDGERFLOW_TEST_POSTGRES_URL"] = args.postgres_url

    from ledgerflow import SyncEngine
    from postgres_schema import postgres_url

    chaos = _machinery()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    db_url = postgres_url(f"bench-chaos-{seed}-{time.time()}")

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    say(f"chaos seed {seed}: {args.orders} orders, {args.workers} workers on {db_url}")
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="ledgerflow-chaos-") as folder,
        chaos.chaos_service(Path(folder) / "participants") as service,
        SyncEngine(db_url, chaos.registry_for_tests()) as engine,
        chaos.fleet_of(db_url, service, Path(folder) / "workers.log", args.workers) as fleet,
    ):
        starter = chaos.Starter(
            db_url, args.orders, prefix="bench", over_seconds=args.start_seconds
        )
        starter.start()
        deadline = time.monotonic() + args.timeout
        chaos.drive_chaos(
            fleet,
            rng,
            done=lambda: starter.finished() and chaos.unfinished(engine) == 0,
            deadline=deadline,
            kill_every=args.kill_every,
            stop_seconds=args.stop_seconds,
            stops_max=args.stops,
            log=say,
            holders=lambda: chaos.leases_by_pid(engine),
        )
        ids = starter.join_ids(timeout=args.start_seconds + 60)
        terminal = chaos.wait_all_terminal(
            engine, len(ids), timeout=max(1.0, deadline - time.monotonic())
        )
        seconds = time.monotonic() - began
        stale = fleet.stale_owner_noticed()
        kills, stops = fleet.kills, fleet.stops
        verdict = chaos.verdict(engine, service, ids)
    summary = {
        "orders": len(ids),
        "workers": args.workers,
        "seed": seed,
        "all_terminal": terminal,
        "kills": kills,
        "stops": stops,
        "stale_owner_noticed": stale,
        "duplicates": len(verdict.duplicates),
        "lost_completions": len(verdict.lost_completions),
        "confirmed_never_applied": len(verdict.never_applied),
        "not_succeeded": len(verdict.not_succeeded),
        "statuses": verdict.statuses,
        "seconds": round(seconds, 1),
    }
    print(json.dumps(summary))
    clean = terminal and not (
        verdict.duplicates or verdict.lost_completions or verdict.never_applied
    )
    return 0 if clean and not verdict.not_succeeded else 1


if __name__ == "__main__":
    sys.exit(main())
