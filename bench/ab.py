"""Ledgerflow against itself: one workload of ``compare.py`` run alternately on the code of two
revisions, to time a change against the main it started from.

    python bench/ab.py --base 08868b5                      # this checkout vs 08868b5, SQLite
    python bench/ab.py --base main~3 --backends sqlite postgres --pairs 4
    python bench/ab.py --base v1 --workload effects3 --mode concurrent --n 1000

The base revision is checked out into a temporary git worktree (detached, removed after);
both sides run the same ``compare.py --role ledgerflow`` (this checkout's bench code, so
both are measured the same way) in a fresh subprocess on a fresh store, with the interpreter
of this checkout and ``PYTHONPATH`` pointing at each side's ``src``. The order alternates from
pair to pair (A B, B A, ...), so a machine that slows down over the run weighs on both sides.
Progress goes to stderr; the last line of stdout is one JSON object: every run's figures and,
per backend and side, the medians of throughput and start latency.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PG_URL_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
RUN_SECONDS_MAX = 600


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """The revision's tree in a temporary worktree, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="ledgerflow-ab-"))
    tree = folder / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), revision],
        check=True,
        capture_output=True,
    )
    try:
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
            check=False,
            capture_output=True,
        )


def _store_args(backend: str, folder: Path, label: str, pg_url: str) -> list[str]:
    if backend == "sqlite":
        path = folder / f"{label}.db"
        return ["--backend", "sqlite", "--path", str(path), "--db", f"sqlite:///{path}"]
    schema = f"bench_ab_{os.getpid()}_{label.replace('-', '_')}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    joiner = "&" if "?" in pg_url else "?"
    return [
        *("--backend", "postgres", "--base-url", pg_url, "--schema", schema),
        *("--db", f"{pg_url}{joiner}schema={schema}"),
    ]


def run_once(src: Path, store: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """One role run of ``compare.py`` on ``src``'s code: its figures."""
    command = [
        sys.executable,
        str(HERE / "compare.py"),
        "--role",
        "ledgerflow",
        *store,
        "--workload",
        args.workload,
        "--mode",
        args.mode,
        "--n",
        str(args.n),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(HERE)])}
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdin is not None
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.strip() == "ready", f"the role said {line!r}"
    process.stdin.write("go\n")
    process.stdin.flush()
    out, _ = process.communicate(timeout=RUN_SECONDS_MAX)
    results = [json.loads(x[len("result ") :]) for x in out.splitlines() if x.startswith("result ")]
    assert results, f"no result line in {out!r}"
    figures: dict[str, Any] = results[-1]
    return figures


def _medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    # A base older than the CPU figure does not report it: both sides then show none.
    cpu = [r["cpu_ms_per_workflow"] for r in runs if "cpu_ms_per_workflow" in r]
    return {
        "wps": round(statistics.median(r["wps"] for r in runs), 1),
        **({"cpu_ms_per_workflow": round(statistics.median(cpu), 3)} if cpu else {}),
        "start_p50_ms": round(statistics.median(r["start_latency_ms"]["p50"] for r in runs), 1),
        "start_p99_ms": round(statistics.median(r["start_latency_ms"]["p99"] for r in runs), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to time against")
    parser.add_argument("--backends", nargs="+", choices=("sqlite", "postgres"), default=["sqlite"])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--workload", choices=("steps3", "effects3"), default="steps3")
    parser.add_argument("--mode", choices=("sequential", "concurrent"), default="concurrent")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--postgres-url", default=os.environ.get("LEDGERFLOW_BENCH_POSTGRES_URL"))
    args = parser.parse_args()
    pg_url = args.postgres_url or PG_URL_DEFAULT
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    runs: list[dict[str, Any]] = []
    began = time.monotonic()
    with checkout(args.base) as base_tree, tempfile.TemporaryDirectory() as scratch:
        sides = {"base": base_tree / "src", "head": ROOT / "src"}
        for backend in args.backends:
            for pair in range(args.pairs):
                order = ["base", "head"] if pair % 2 == 0 else ["head", "base"]
                for side in order:
                    label = f"{backend}-{pair}-{side}"
                    store = _store_args(backend, Path(scratch), label, pg_url)
                    figures = run_once(sides[side], store, args)
                    say(f"{label}: {figures['wps']} wf/s, start p50 "
                        f"{figures['start_latency_ms']['p50']} ms, cpu "
                        f"{figures.get('cpu_ms_per_workflow')} ms/wf")  # fmt: skip
                    runs.append({"backend": backend, "pair": pair, "side": side, **figures})
    summary = {
        backend: {
            side: _medians([r for r in runs if (r["backend"], r["side"]) == (backend, side)])
            for side in ("base", "head")
        }
        for backend in args.backends
    }
    print(
        json.dumps(
            {
                "base": args.base,
                "head": head,
                "workload": args.workload,
                "mode": args.mode,
                "n": args.n,
                "pairs": args.pairs,
                "medians": summary,
                "runs": runs,
                "seconds": round(time.monotonic() - began, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
