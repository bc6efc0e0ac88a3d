"""``ledgerflow migrate``: bring a journal's schema up to date, as one explicit step (internal).

Workers and ``start`` migrate on open by default; teams whose schema changes go through review
open their stores with ``?migrate=false`` and run this command instead, after reading what
``--dry-run`` says it would apply. It creates a missing SQLite journal (a PostgreSQL database
must exist; its schema is created). A journal written by a newer Ledgerflow, or whose recorded
history was altered, is refused and left untouched.
"""

from __future__ import annotations

import json
from typing import Any

import click

from ledgerflow.cli.options import db_option
from ledgerflow.cli.render import inert
from ledgerflow.operators.service import MigrationStatus, migrate_journal, migration_status


def _json(before: MigrationStatus, *, applied: bool) -> dict[str, Any]:
    pending = [m.label for m in before.pending]
    return {
        "journal": before.where,
        "existed": before.exists,
        "version_before": before.version,
        "version": before.pending[-1].number if applied and before.pending else before.version,
        "applied" if applied else "would_apply": pending,
    }


def _sentence(before: MigrationStatus, *, dry_run: bool) -> str:
    where = inert(before.where)
    if not before.pending:
        return f"{where} is up to date (schema version {before.version}); nothing to apply"
    labels = ", ".join(m.label for m in before.pending)
    newest = before.pending[-1].number
    created = "" if before.exists else " (the journal does not exist yet and would be created)"
    if dry_run:
        return (
            f"dry run: {where} is at schema version {before.version}{created}; migrating "
            f"would apply {labels} (to version {newest}); nothing was changed"
        )
    made = "" if before.exists else " (created)"
    return f"{where}{made}: applied {labels}; schema version {before.version} -> {newest}"


@click.command("migrate")
@db_option
@click.option("--dry-run", is_flag=True, help="Say what would be applied; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a sentence.")
def migrate(db: str, dry_run: bool, as_json: bool) -> None:
    """Apply the schema migrations this Ledgerflow needs to the journal at --db.

    Read-only commands never migrate, and stores opened with ?migrate=false refuse an older
    schema: this is the step that brings it up to date. Safe to repeat, and safe while
    workers run (migrations take a lock; each is one transaction).
    """
    before = migration_status(db) if dry_run else migrate_journal(db)
    if as_json:
        click.echo(json.dumps(_json(before, applied=not dry_run), indent=2, sort_keys=True))
    else:
        click.echo(_sentence(before, dry_run=dry_run))


def register(group: click.Group) -> None:
    group.add_command(migrate)
