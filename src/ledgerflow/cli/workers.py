"""``ledgerflow workers``: the live workers from the command line (internal).

Lists every worker whose heartbeat in the journal's registry is within the liveness bound
(``worker_silent_seconds`` of ``LEDGERFLOW_DETECTION``, 30 s by default): where it runs, its
slots, its last heartbeat and the definitions (workflow, version, fingerprint) it serves, which
are the only instances it claims. Reading needs no workflow code.
"""

from __future__ import annotations

import time

import click
from rich.table import Table

from ledgerflow.cli.options import db_option, echo_json, json_option
from ledgerflow.cli.render import cell, console, lines_cell, print_table, when
from ledgerflow.operators.service import Operations, WorkerRecord, worker_json
from ledgerflow.operators.shapes import listing


def _table(workers: list[WorkerRecord], *, now: float) -> Table:
    table = Table(title="live workers (oldest first)", title_justify="left")
    for name in ("worker", "host", "pid", "slots", "started", "last heartbeat", "serves"):
        table.add_column(name, overflow="fold")
    for worker in workers:
        table.add_row(
            cell(worker.worker_id),
            cell(worker.host),
            cell(worker.pid),
            cell(worker.slots),
            cell(when(worker.started_at)),
            cell(f"{max(0.0, now - worker.heartbeat_at):.1f}s ago"),
            lines_cell([s.label for s in worker.serves]),
        )
    return table


@click.command("workers")
@db_option
@json_option
def workers_command(db: str, as_json: bool) -> None:
    """List the live workers: last heartbeat, slots and the definitions each serves."""
    with Operations(db) as operations:
        found = operations.workers()
    now = time.time()
    if as_json:
        echo_json(listing([worker_json(w, now=now) for w in found]))
        return
    out = console()
    if not found:
        out.print("no live worker: nothing runs until one starts")
        return
    print_table(out, _table(found, now=now))


def register(group: click.Group) -> None:
    group.add_command(workers_command)
