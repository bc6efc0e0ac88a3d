"""No silent regressions: every Ledgerflow workload of ``compare.py`` on a base revision and on
this working tree, run alternately, printed side by side with their spread.

    python bench/regress.py --base d97302f --quick      # CI smoke: small sizes, one pair
    python bench/regress.py --base main                 # compare.py's sizes, 3 pairs
    python bench/regress.py --base main --backends postgres --pairs 5

The base is checked out into a temporary git worktree and "installed" by putting its ``src``
first on ``PYTHONPATH`` for this checkout's interpreter (``ab.py``; checked to be what
``import ledgerflow`` loads): the same dependencies on both sides, no copy of them. Each
workload of ``compare.WORKLOADS`` (steps3 one after another, steps3 and effects3 at once,
recovery of a SIGKILLed worker's instances) runs through ``compare.run_once``, the code that
measures Ledgerflow in the comparison with DBOS, on a fresh store per run, base and working
tree alternating (A B, B A, ...), on SQLite and on PostgreSQL when it answers. The working
tree's uncommitted changes are measured too (``head`` says ``+changes``).

Progress goes to stderr; the last line of stdout is one JSON object: per backend and
workload, each side's median, least and greatest throughput, CPU per workflow and start
latency p50/p99, and ``head_vs_base`` (the ratio of the median throughputs and CPU costs);
every run's figures under ``runs``; the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any

import compare
from ab import ROOT, SIDES, Sides, checkout, order_of, postgres_reachable, revision_of, spread_of


def say(text: str) -> None:
    print(f"[regress {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def ratio(head: dict[str, Any], base: dict[str, Any], figure: str) -> float | None:
    if figure not in head or figure not in base or not base[figure]["median"]:
        return None
    return round(head[figure]["median"] / base[figure]["median"], 3)


def regress(args: argparse.Namespace) -> dict[str, Any]:
    sizes = compare.QUICK if args.quick else compare.FULL
    pairs = args.pairs or (1 if args.quick else int(compare.FULL["runs"]))
    pg_url = args.postgres_url or compare.pg_url_of(argparse.Namespace(postgres_url=None))
    load_before = os.getloadavg()
    began = time.monotonic()
    runs: list[dict[str, Any]] = []
    results: dict[str, Any] = {}
    with checkout(args.base) as base_tree, tempfile.TemporaryDirectory() as scratch:
        base_commit = revision_of(base_tree)
        base_folder = str(base_tree.parent)
        sides = Sides(base_tree, ROOT, scratch, pg_url)
        for backend in args.backends:
            if backend == "postgres":
                why = postgres_reachable(pg_url)
                if why is not None:
                    say(f"postgres skipped: {why}")
                    results[backend] = {"skipped": why}
                    continue
            results[backend] = {}
            for name in args.workloads:
                n = compare.size_of(name, sizes)
                mine: list[dict[str, Any]] = []
                for pair in range(pairs):
                    for side in order_of(pair):
                        figures = sides.run(side, backend, name, n)
                        say(f"{backend} {name} pair {pair + 1}/{pairs} {side}: "
                            f"{figures['wps']} wf/s, start p50 "
                            f"{figures['start_latency_ms']['p50']} ms")  # fmt: skip
                        mine.append({"backend": backend, "workload": name, "pair": pair,
                                     "side": side, **figures})  # fmt: skip
                by_side = {s: spread_of([r for r in mine if r["side"] == s]) for s in SIDES}
                results[backend][name] = {
                    "n": n,
                    **by_side,
                    "head_vs_base": {
                        figure: ratio(by_side["head"], by_side["base"], figure)
                        for figure in ("wps", "cpu_ms_per_workflow")
                    },
                }
                runs += mine
    return {
        "base": args.base,
        "base_commit": base_commit,
        "base_folder": base_folder,
        "head": revision_of(ROOT, dirty_mark=True),
        "quick": args.quick,
        "pairs": pairs,
        "results": results,
        "runs": runs,
        "settings": {
            "sizes": sizes,
            "how": "compare.run_once (role ledgerflow) per run, fresh store, sides alternating",
            "base_installed_as": "git worktree of the base, its src first on PYTHONPATH",
            "loadavg_before": list(load_before),
            "loadavg_after": list(os.getloadavg()),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        },
        "seconds": round(time.monotonic() - began, 1),
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--base", required=True, help="the revision to time the working tree against")
    p.add_argument("--quick", action="store_true", help="compare.py's quick sizes, one pair")
    p.add_argument("--pairs", type=int, default=None, help="base/head pairs per workload")
    p.add_argument(
        "--backends", nargs="+", choices=compare.BACKENDS, default=list(compare.BACKENDS)
    )
    p.add_argument(
        "--workloads", nargs="+", choices=list(compare.WORKLOADS), default=list(compare.WORKLOADS)
    )
    p.add_argument(
        "--postgres-url",
        default=None,
        help="default $LEDGERFLOW_BENCH_POSTGRES_URL, $LEDGERFLOW_TEST_POSTGRES_URL, or "
        f"{compare.PG_URL_DEFAULT}",
    )
    args = p.parse_args(argv)
    if args.pairs is not None and args.pairs < 1:
        p.error("--pairs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    print(json.dumps(regress(parse(argv))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
