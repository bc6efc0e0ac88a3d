"""``ledgerflow locks``: the held durable locks from the command line (internal).

Lists every lock an instance holds (``ctx.lock``): its holder, whether the holder is parked
(MANUAL_INTERVENTION or FORWARD_RECOVERY_REQUIRED: it keeps the lock until a person decides),
how long it has held it, and the instances queued for it in the order it will be handed on.
Reading needs no workflow code.
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from ledgerflow.cli.options import db_option, echo_json, json_option
from ledgerflow.cli.render import cell, console, lines_cell, print_table
from ledgerflow.operators.service import Operations
from ledgerflow.operators.shapes import listing


def _table(found: list[dict[str, Any]]) -> Table:
    table = Table(title="held locks (by name)", title_justify="left")
    for name in ("lock", "tenant", "holder", "status", "held", "waiters (in turn)"):
        table.add_column(name, overflow="fold")
    for lock in found:
        holder = lock["holder"] or {
            "instance_id": "(nobody: free, yet waited for)",
            "seq": "-",
            "status": "-",
            "parked": False,
            "held_seconds": 0.0,
        }
        status = holder["status"] + (" (parked: keeps the lock)" if holder["parked"] else "")
        table.add_row(
            cell(lock["name"]),
            cell(lock["tenant"]),
            cell(f"{holder['instance_id']} step {holder['seq']}"),
            cell(status),
            cell(f"{holder['held_seconds']:.1f}s"),
            lines_cell(
                [f"{w['instance_id']} ({w['waited_seconds']:.1f}s)" for w in lock["waiters"]]
            ),
        )
    return table


@click.command("locks")
@db_option
@json_option
@click.option("--tenant", default=None, help="Only this tenant's locks (default: every tenant).")
def locks_command(db: str, as_json: bool, tenant: str | None) -> None:
    """List the held durable locks: holder (parked or not), since when, and who waits."""
    with Operations(db) as operations:
        found = operations.locks(tenant=tenant)
    if as_json:
        echo_json(listing(found))
        return
    out = console()
    if not found:
        out.print("no lock is held")
        return
    print_table(out, _table(found))


def register(group: click.Group) -> None:
    group.add_command(locks_command)
