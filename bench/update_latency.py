"""How long ``engine.update`` takes to return its reply when the worker answering it runs in
the same process (a declared handler under a wait): sequential updates, p50 / p99 / max.

    python bench/update_latency.py              # 200 updates on a fresh SQLite journal
    python bench/update_latency.py --updates 50 --url postgresql://...

The reply is a published value; a caller learns of it from the store (a poll every
``limits.VALUE_POLL_SECONDS``) or, in the process that committed it, from the commit itself.
Prints one JSON object on the last line of stdout.
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

registry = lf.Registry()


@registry.workflow(name="counter", version=1)
async def counter(ctx: lf.WorkflowContext, start: int) -> int:
    totals = [start]

    def add(amount: int) -> int:
        totals.append(amount)
        return sum(totals)

    ctx.on_update("add", add)
    await ctx.wait_for("close")
    return sum(totals)


async def measure(url: str, updates: int) -> dict[str, Any]:
    async with lf.Engine(url, registry) as engine:
        iid = str(
            (await engine.start("counter", key=f"bench-{time.time_ns()}", input=0)).instance_id
        )
        worker = asyncio.create_task(engine.worker(poll_seconds=0.01).run())
        await engine.update(iid, "add", 0, update_id="warm-up", timeout=30)
        seconds = []
        for n in range(updates):
            began = time.perf_counter()
            await engine.update(iid, "add", 1, update_id=f"u-{n}", timeout=30)
            seconds.append(time.perf_counter() - began)
        await engine.signal(iid, "close", event_id="close")
        assert await engine.result(iid, timeout=30) == updates
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    ms = sorted(s * 1000 for s in seconds)
    return {
        "updates": updates,
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
        "max_ms": round(ms[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--url", default=None, help="a journal URL (default: a fresh SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = args.url or f"sqlite:///{folder}/journal.db"
        print(f"{args.updates} sequential updates on {url.split(':')[0]}", file=sys.stderr)
        print(json.dumps(asyncio.run(measure(url, args.updates))))


if __name__ == "__main__":
    main()
