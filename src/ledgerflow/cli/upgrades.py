"""``ledgerflow replay``, ``ledgerflow export`` and ``ledgerflow versions upgrade|migrate``:
check a change of workflow code against recorded histories, and move in-flight instances to
code their journals replay cleanly against (internal).

``replay MODULE:REGISTRY --db URL`` replays in-flight and recently ended instances of the
journal; ``--histories DIR`` replays exported files instead (``export ID --db URL > h.json``),
with no journal at all. It exits 1 when any history diverges, so CI can run it. ``versions
upgrade W@N MODULE:REGISTRY --to-fingerprint F`` and ``versions migrate W@N MODULE:REGISTRY
--to M --plan FILE`` move only the instances that replay clean, each in one audited
transaction, and list the others; ``--dry-run`` reports and writes nothing. Everything goes
through the operators' service.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from ledgerflow import limits
from ledgerflow.cli.loading import load_registry
from ledgerflow.cli.options import (
    DB_ENVIRONMENT_VARIABLE,
    authority_of,
    authority_option,
    db_option,
    echo_json,
    json_option,
    retired_actor_option,
)
from ledgerflow.cli.render import cell, console, inert, print_table, short
from ledgerflow.errors import CommandLineError, LedgerflowError, PayloadError
from ledgerflow.model.codec import JSON
from ledgerflow.operators.service import (
    MigrationPlan,
    MoveReport,
    Operations,
    ReplayVerdict,
    local_actor,
)
from ledgerflow.operators.shapes import listing
from ledgerflow.operators.upgrades import replay_folder

_SIDE_CHARS = 90


def _verdicts_table(verdicts: list[ReplayVerdict]) -> Table:
    table = Table(title="replay verdicts", title_justify="left")
    for name in ("instance", "workflow", "status", "verdict", "position"):
        table.add_column(name, overflow="fold")
    table.add_column("journal holds", overflow="fold")
    table.add_column("code asks for", overflow="fold")
    for v in verdicts:
        table.add_row(
            cell(v.instance_id),
            cell(f"{v.workflow} v{v.version}"),
            cell(v.status),
            cell("compatible" if v.compatible else v.kind),
            cell(v.position if not v.compatible else f"({v.replayed} replayed)"),
            cell(short(v.holds if not v.compatible else None, _SIDE_CHARS) or "-"),
            cell(short(v.asks if not v.compatible else v.reason, _SIDE_CHARS) or "-"),
        )
    return table


def _show_verdicts(verdicts: list[ReplayVerdict], *, where: str, as_json: bool) -> None:
    diverged = [v for v in verdicts if not v.compatible]
    if as_json:
        echo_json(listing([v.to_json() for v in verdicts]))
    else:
        click.echo(
            inert(
                f"replayed {len(verdicts)} histories from {where}: "
                f"{len(verdicts) - len(diverged)} compatible, {len(diverged)} divergent"
            )
        )
        if verdicts:
            print_table(console(), _verdicts_table(verdicts))
        for v in diverged:
            click.echo(inert(f"{v.instance_id}: {v.reason}"))
    if diverged:
        raise SystemExit(1)  # see cli.verify: under standalone_mode=False click would return it


@click.command("replay")
@click.argument("target", metavar="MODULE:REGISTRY")
@click.option(
    "--db",
    "db",
    envvar=DB_ENVIRONMENT_VARIABLE,
    help=f"Store URL whose histories are replayed (or set {DB_ENVIRONMENT_VARIABLE}).",
)
@click.option(
    "--histories",
    type=click.Path(file_okay=False, exists=True),
    help="Replay the exported histories (*.json) of this folder instead of a journal's.",
)
@click.option("--workflow", help="Only this workflow's instances.")
@click.option("--version", "version", type=click.IntRange(min=1), help="Only this version's.")
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=limits.REPLAY_SCAN_MAX),
    default=limits.REPLAY_LIMIT_DEFAULT,
    show_default=True,
    help="At most this many instances, newest first.",
)
@json_option
def replay_command(
    target: str,
    db: str | None,
    histories: str | None,
    workflow: str | None,
    version: int | None,
    limit: int,
    as_json: bool,
) -> None:
    """Replay recorded histories against the code of MODULE:REGISTRY as it is now.

    Nothing is dispatched and nothing is written: each step and effect is answered from the
    journal. Each history is compatible, or the first divergent position is shown with what
    the journal holds and what the code asked for. Exits 1 when any history diverges.
    """
    registry = load_registry(target)
    if histories is not None:
        verdicts = replay_folder(registry, histories, codec=JSON)
        verdicts = [
            v
            for v in verdicts
            if (workflow is None or v.workflow == workflow)
            and (version is None or v.version == version)
        ][:limit]
        _show_verdicts(verdicts, where=histories, as_json=as_json)
        return
    if not db:
        raise click.UsageError(f"--db URL (or {DB_ENVIRONMENT_VARIABLE}) or --histories DIR")
    with Operations(db) as operations:
        verdicts = operations.replay(registry, workflow=workflow, version=version, limit=limit)
    _show_verdicts(verdicts, where="the journal", as_json=as_json)


@click.command("export")
@click.argument("instance_id", metavar="ID")
@db_option
def export_command(instance_id: str, db: str) -> None:
    """Print one instance's history (steps, effects with keys and evidence, timeline, inbox)
    as a versioned JSON document, for ``ledgerflow replay --histories``."""
    with Operations(db) as operations:
        document = operations.export(instance_id)
    echo_json(document)


def _workflow_at(text: str) -> tuple[str, int]:
    name, at, number = text.rpartition("@")
    if not at or not name or not number.isdigit() or int(number) < 1:
        raise click.BadParameter(f"{text!r} is not WORKFLOW@VERSION (e.g. order@1)")
    return name, int(number)


def _show_report(report: MoveReport, *, as_json: bool) -> None:
    if as_json:
        echo_json(report.to_json())
        return
    what = "dry run (nothing written)" if report.dry_run else report.kind
    moved = [o for o in report.outcomes if o.outcome in ("moved", "would-move")]
    click.echo(
        inert(
            f"{what}: {report.workflow} v{report.from_version} -> v{report.to_version} "
            f"{report.to_fingerprint}: {len(moved)} "
            f"{'would move' if report.dry_run else 'moved'}, {len(report.left_pinned)} left "
            "pinned"
        )
    )
    if not report.outcomes:
        click.echo(f"nothing to {report.kind}: no in-flight instance is pinned to other code")
        return
    table = Table(title="instances", title_justify="left")
    for name in ("instance", "status", "outcome", "audit", "why"):
        table.add_column(name, overflow="fold")
    for o in report.outcomes:
        why = o.refusal or (o.verdict.reason if o.verdict and not o.verdict.compatible else None)
        table.add_row(
            cell(o.instance_id),
            cell(o.status),
            cell(o.outcome),
            cell(f"#{o.audit_id}" if o.audit_id else "-"),
            cell(short(why, 160) or "-"),
        )
    print_table(console(), table)


@click.group("versions")
def versions_group() -> None:
    """Move in-flight instances to other workflow code, proven by replay first."""


@versions_group.command("upgrade")
@click.argument("workflow_at", metavar="WORKFLOW@VERSION")
@click.argument("target", metavar="MODULE:REGISTRY")
@click.option(
    "--to-fingerprint",
    help="The fingerprint the registry's code must have (default: whatever it has); a check "
    "that the code loaded is the code meant.",
)
@click.option("--dry-run", is_flag=True, help="Replay and report; move and record nothing.")
@db_option
@authority_option
@retired_actor_option
@json_option
def upgrade_command(
    workflow_at: str,
    target: str,
    to_fingerprint: str | None,
    dry_run: bool,
    db: str,
    authority_file: str | None,
    as_json: bool,
) -> None:
    """Move WORKFLOW@VERSION's in-flight instances to the code MODULE:REGISTRY has for that
    version (its fingerprint, or --to-fingerprint as a check): each only if its journal
    replays clean against it, in one transaction with its audit record; the others stay
    pinned, listed and (unless a dry run) on the record as refused. Needs a grant that allows
    ``upgrade`` in the authority file (as local:ACCOUNT); a dry run needs none."""
    workflow, version = _workflow_at(workflow_at)
    registry = load_registry(target)
    if to_fingerprint is None:
        try:
            to_fingerprint = registry.get(workflow, version).fingerprint
        except LedgerflowError as exc:
            raise CommandLineError(
                f"{target} has no code for {workflow_at}: {exc.message}"
            ) from None
    with Operations(db, authority=authority_of(authority_file)) as operations:
        report = operations.upgrade(
            registry,
            workflow=workflow,
            version=version,
            to_fingerprint=to_fingerprint,
            actor=local_actor(),
            dry_run=dry_run,
        )
    _show_report(report, as_json=as_json)


def _plan_document(path: str) -> Any:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
        if file.suffix == ".toml":
            return tomllib.loads(text)
        return json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PayloadError(f"the plan {file} cannot be read: {exc}") from None


@versions_group.command("migrate")
@click.argument("workflow_at", metavar="WORKFLOW@VERSION")
@click.argument("target", metavar="MODULE:REGISTRY")
@click.option("--to", "to_version", type=click.IntRange(min=1), required=True, help="Version.")
@click.option(
    "--plan",
    "plan_file",
    required=True,
    type=click.Path(dir_okay=False, exists=True),
    help="The mapping of journal positions (JSON, or TOML by its .toml suffix).",
)
@click.option("--dry-run", is_flag=True, help="Replay and report; move and record nothing.")
@db_option
@authority_option
@retired_actor_option
@json_option
def migrate_command(
    workflow_at: str,
    target: str,
    to_version: int,
    plan_file: str,
    dry_run: bool,
    db: str,
    authority_file: str | None,
    as_json: bool,
) -> None:
    """Move WORKFLOW@VERSION's in-flight instances to version --to under the plan's mapping of
    journal positions: each only if the new code replays the mapped journal clean, keeping
    every effect id and idempotency key, in one transaction with its audit record. Needs a
    grant that allows ``migrate`` in the authority file (as local:ACCOUNT)."""
    workflow, version = _workflow_at(workflow_at)
    document = _plan_document(plan_file)
    if not isinstance(document, dict):
        raise PayloadError(f"the plan {plan_file} is not a table of settings")
    asked = {"workflow": workflow, "from_version": version, "to_version": to_version}
    for key, value in asked.items():
        if key in document and document[key] != value:
            raise click.UsageError(f"the plan says {key} {document[key]!r}, the command {value!r}")
    plan = MigrationPlan.from_document({**document, **asked}, source=plan_file)
    registry = load_registry(target)
    with Operations(db, authority=authority_of(authority_file)) as operations:
        report = operations.migrate_instances(registry, plan, actor=local_actor(), dry_run=dry_run)
    _show_report(report, as_json=as_json)


def register(group: click.Group) -> None:
    group.add_command(replay_command)
    group.add_command(export_command)
    # Other commands about versions may share the group: add to it when it exists.
    existing = group.commands.get("versions")
    if isinstance(existing, click.Group):
        for command in versions_group.commands.values():
            existing.add_command(command)
    else:
        group.add_command(versions_group)
