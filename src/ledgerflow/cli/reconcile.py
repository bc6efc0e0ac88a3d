"""``ledgerflow reconcile``: compare the ledger with the participants' facts (internal).

``ledgerflow reconcile MODULE:OBJECT --db URL`` runs one bounded reconciliation with the
participants of that registry (it needs their lookups, hence the workflow code), attributed to
the reconciler, and prints what it compared, corrected and escalated; ``--dry-run`` asks the
same questions and writes nothing. ``ledgerflow reconcile --runs --db URL`` lists past runs and
needs no workflow code.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import click
from rich.table import Table

from ledgerflow import limits
from ledgerflow.cli.loading import load_registry
from ledgerflow.cli.options import db_option, echo_json, json_option
from ledgerflow.cli.render import cell, console, inert, print_table, short, when
from ledgerflow.operators.service import Operations, ReconciliationRun
from ledgerflow.operators.shapes import listing

RUNS_LISTED_DEFAULT = 20
_NOTE_CHARS = 120


def _summary(run: ReconciliationRun) -> str:
    name = "dry run (nothing written)" if run.dry_run else f"run {run.run_id}"
    return (
        f"reconciliation {name} by {run.actor}: compared {run.compared}, matched {run.matched}, "
        f"corrected {run.corrected}, escalated {run.escalated}, unreachable {run.unreachable}"
    )


def _details_table(run: ReconciliationRun) -> Table:
    table = Table(title="differences", title_justify="left")
    for name in ("instance", "effect", "key", "ledger", "participant", "action", "audit/flag"):
        table.add_column(name, overflow="fold")
    table.add_column("note", overflow="fold")
    for line in run.details:
        mark = f"audit #{line['audit_id']}" if line.get("audit_id") else line.get("flag")
        table.add_row(
            cell(line.get("instance_id")),
            cell(f"{line.get('participant')}.{line.get('operation')}"),
            cell(line.get("key")),
            cell(line.get("ledger_state")),
            cell(line.get("participant_verdict")),
            cell(line.get("action")),
            cell(mark),
            cell(short(line.get("note"), _NOTE_CHARS)),
        )
    return table


def _runs_table(runs: list[ReconciliationRun]) -> Table:
    table = Table(title="reconciliation runs (newest first)", title_justify="left")
    columns = ("run", "actor", "started", "finished", "compared", "matched", "corrected")
    for name in (*columns, "escalated", "unreachable"):
        table.add_column(name, overflow="fold")
    for run in runs:
        table.add_row(
            cell(run.run_id),
            cell(run.actor),
            cell(when(run.started_at)),
            cell(when(run.finished_at) or "(unfinished)"),
            *(
                cell(n)
                for n in (run.compared, run.matched, run.corrected, run.escalated, run.unreachable)
            ),
        )
    return table


def _run_json(run: ReconciliationRun) -> dict[str, Any]:
    out = dataclasses.asdict(run)
    out["details"] = list(run.details)
    return out


def _list_runs(db: str, limit: int, as_json: bool) -> None:
    with Operations(db) as operations:
        runs = operations.reconciliations(limit=limit)
    if as_json:
        echo_json(listing([_run_json(r) for r in runs]))
    elif not runs:
        click.echo("no reconciliation has run yet")
    else:
        print_table(console(), _runs_table(runs))


def _run_once(
    target: str, db: str, *, limit: int, max_corrections: int, dry_run: bool
) -> ReconciliationRun:
    registry = load_registry(target)
    # The engine checks the reconciler's authority like anyone's (LEDGERFLOW_AUTHORITY).
    with Operations(db) as operations:
        return operations.reconcile(
            registry, limit=limit, max_corrections=max_corrections, dry_run=dry_run
        )


@click.command("reconcile")
@click.argument("target", metavar="MODULE:OBJECT", required=False)
@db_option
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=limits.RECONCILE_LIMIT_MAX),
    default=None,
    help=f"At most this many effects compared (default {limits.RECONCILE_LIMIT_DEFAULT}); "
    f"with --runs, this many runs listed (default {RUNS_LISTED_DEFAULT}).",
)
@click.option(
    "--max-corrections",
    type=click.IntRange(min=0, max=limits.RECONCILE_LIMIT_MAX),
    default=limits.RECONCILE_CORRECTIONS_DEFAULT,
    show_default=True,
    help="At most this many corrections; the rest wait for the next run.",
)
@click.option("--dry-run", is_flag=True, help="Compare and report; change and record nothing.")
@click.option("--runs", "list_runs", is_flag=True, help="List past runs (no workflow code needed).")
@json_option
def reconcile_command(
    target: str | None,
    db: str,
    limit: int | None,
    max_corrections: int,
    dry_run: bool,
    list_runs: bool,
    as_json: bool,
) -> None:
    """Compare what the ledger claims with the participants of MODULE:OBJECT (a Registry).

    Settled (CONFIRMED, FAILED) and parked UNKNOWN effects are checked through each
    participant's lookup, least recently checked first. An UNKNOWN effect the participant
    proves applied is resolved through the audited repair command, as the reconciler; every
    other difference raises an attention flag for a person. Each run is recorded.
    """
    if list_runs:
        if target is not None or dry_run:
            raise click.UsageError("--runs takes no MODULE:OBJECT and no --dry-run")
        _list_runs(db, min(limit or RUNS_LISTED_DEFAULT, limits.RECONCILE_RUNS_LISTED_MAX), as_json)
        return
    if target is None:
        raise click.UsageError("MODULE:OBJECT is required (the participants' lookups)")
    run = _run_once(
        target,
        db,
        limit=limit or limits.RECONCILE_LIMIT_DEFAULT,
        max_corrections=max_corrections,
        dry_run=dry_run,
    )
    if as_json:
        echo_json(_run_json(run))
        return
    click.echo(inert(_summary(run)))
    if run.details:
        print_table(console(), _details_table(run))


def register(group: click.Group) -> None:
    group.add_command(reconcile_command)
