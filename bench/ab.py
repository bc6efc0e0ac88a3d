"""Ledgerflow against itself: one workload of ``compare.py`` run alternately on the code of two
revisions, to time a change against the main it started from (``regress.py`` runs them all).

    python bench/ab.py --base 08868b5                      # this checkout vs 08868b5, SQLite
    python bench/ab.py --base main~3 --backends sqlite postgres --pairs 4
    python bench/ab.py --base v1 --workload effects3 --mode concurrent --n 1000

The base revision is checked out into a temporary git worktree (detached, removed after);
both sides run the same ``compare.py --role ledgerflow`` (this checkout's bench code, so
both are measured the same way, through ``compare.run_once``) in a fresh subprocess on a fresh
store, with the interpreter of this checkout and ``PYTHONPATH`` pointing at each side's
``src``, checked before the first run to be where ``import ledgerflow`` really resolves (the
project's dependencies are the same on both sides; a base that needs others fails that
check with what it could not import). The order alternates from pair to pair (A B, B A,
...), so a machine that slows down over the run weighs on both sides. Progress goes to
stderr; the last line of stdout is one JSON object: every run's figures and, per backend
and side, the median, least and greatest of throughput, CPU per workflow and start latency.

This module is also the shared part of ``regress.py``: :func:`checkout`, :class:`Sides`
(running a workload on one side's code) and :func:`spread_of` (the summary).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import compare
import psycopg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SIDES = ("base", "head")
# The figures a side is summarised by (a base older than the CPU figure has none of it).
FIGURES = {
    "wps": lambda r: r["wps"],
    "cpu_ms_per_workflow": lambda r: r.get("cpu_ms_per_workflow"),
    "start_p50_ms": lambda r: r["start_latency_ms"]["p50"],
    "start_p99_ms": lambda r: r["start_latency_ms"]["p99"],
}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """The revision's tree in a temporary worktree, removed afterwards with its folder."""
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
        shutil.rmtree(folder, ignore_errors=True)


def git(tree: Path, *arguments: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(tree), *arguments], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def revision_of(tree: Path, *, dirty_mark: bool = False) -> str:
    """The short commit of ``tree``, with ``+changes`` when asked and its files differ."""
    head = git(tree, "rev-parse", "--short", "HEAD")
    if dirty_mark and git(tree, "status", "--porcelain", "--untracked-files=no"):
        head += "+changes"
    return head


def pythonpath(src: Path) -> str:
    return os.pathsep.join([str(src), str(HERE)])


def check_imports_from(src: Path) -> None:
    """``import ledgerflow`` with ``src`` first on the path must load ``src``'s package: an
    installed copy that shadowed it would time one revision twice."""
    done = subprocess.run(
        [sys.executable, "-c", "import ledgerflow; print(ledgerflow.__file__)"],
        env={**os.environ, "PYTHONPATH": pythonpath(src)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{src}: ledgerflow does not import: {done.stderr.strip()[-500:]}")
    found = Path(done.stdout.strip()).resolve()
    if not found.is_relative_to(src.resolve()):
        raise SystemExit(f"{src}: import ledgerflow loads {found} instead")


class Sides:
    """The two sides' code and the fresh stores their runs use."""

    def __init__(self, base: Path, head: Path, folder: str, pg_url: str) -> None:
        self.src = {"base": base / "src", "head": head / "src"}
        for src in self.src.values():
            check_imports_from(src)
        # compare.py's own store handling (fresh file or schema per run, dropped after).
        self.ctx = compare.Context(
            args=argparse.Namespace(), folder=folder, pg_url=pg_url, walinspect_schema=""
        )

    def run(self, side: str, backend: str, name: str, n: int) -> dict[str, Any]:
        """``compare.py``'s Ledgerflow run of workload ``name`` on ``side``'s code."""
        # compare's role subprocesses take this process's environment: PYTHONPATH set here,
        # for the length of one run, is the side's code (the orchestration is one thread).
        before = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = pythonpath(self.src[side])
        try:
            return compare.run_once(self.ctx, backend, "ledgerflow", name, n, False)
        finally:
            if before is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = before


def order_of(pair: int) -> tuple[str, ...]:
    """A B, B A, A B...: a machine that slows down over the run weighs on both sides."""
    return SIDES if pair % 2 == 0 else SIDES[::-1]


def spread_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure: the median, the least and the greatest over ``runs``."""
    out: dict[str, Any] = {}
    for name, read in FIGURES.items():
        values = [v for v in (read(r) for r in runs) if v is not None]
        if values:
            out[name] = {
                "median": round(statistics.median(values), 3),
                "min": round(min(values), 3),
                "max": round(max(values), 3),
            }
    return out


def postgres_reachable(url: str) -> str | None:
    """None when PostgreSQL answers at ``url``, else why not."""
    try:
        with psycopg.connect(url, connect_timeout=compare.PG_CONNECT_TIMEOUT_SECONDS):
            return None
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the revision to time against")
    parser.add_argument("--backends", nargs="+", choices=("sqlite", "postgres"), default=["sqlite"])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--workload", choices=("steps3", "effects3"), default="steps3")
    parser.add_argument(
        "--mode", choices=("sequential", "concurrent", "recovery"), default="concurrent"
    )
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--postgres-url", default=os.environ.get("LEDGERFLOW_BENCH_POSTGRES_URL"))
    args = parser.parse_args()
    names = {workload: name for name, workload in compare.WORKLOADS.items()}
    name = names.get((args.workload, args.mode))
    if name is None:
        parser.error(f"compare.py has no workload {args.workload} {args.mode}: {list(names)}")
    pg_url = args.postgres_url or compare.PG_URL_DEFAULT
    runs: list[dict[str, Any]] = []
    began = time.monotonic()
    with checkout(args.base) as base_tree, tempfile.TemporaryDirectory() as scratch:
        sides = Sides(base_tree, ROOT, scratch, pg_url)
        for backend in args.backends:
            for pair in range(args.pairs):
                for side in order_of(pair):
                    figures = sides.run(side, backend, name, args.n)
                    say(f"{backend}-{pair}-{side}: {figures['wps']} wf/s, start p50 "
                        f"{figures['start_latency_ms']['p50']} ms, cpu "
                        f"{figures.get('cpu_ms_per_workflow')} ms/wf")  # fmt: skip
                    runs.append({"backend": backend, "pair": pair, "side": side, **figures})
    summary = {
        backend: {
            side: spread_of([r for r in runs if (r["backend"], r["side"]) == (backend, side)])
            for side in SIDES
        }
        for backend in args.backends
    }
    print(
        json.dumps(
            {
                "base": args.base,
                "head": revision_of(ROOT, dirty_mark=True),
                "workload": args.workload,
                "mode": args.mode,
                "n": args.n,
                "pairs": args.pairs,
                "spread": summary,
                "runs": runs,
                "seconds": round(time.monotonic() - began, 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
