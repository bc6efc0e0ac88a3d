"""``ledgerflow start|result|list|show``: start instances and read their ledgers (internal).

This module owns the operator's view of instances from the command line. Only ``start`` needs
the user's registry (to pin the definition version and its fingerprint); ``result``, ``list``
and ``show`` read nothing but the store, so they work on a machine that does not have the
workflow code, and they never change anything.

Every command prints rich tables for people and, with ``--json``, one JSON document for
scripts (shapes: :mod:`ledgerflow.operators.shapes`). Errors are the engine's own (``[LFxxx]``
codes, exit 1), except input the command itself cannot read, which is a usage error (exit 2).
``start`` creates and migrates the journal like a worker; ``result``, ``list``, ``show`` and
``cancel`` open it as it is (:func:`~ledgerflow.cli.loading.open_journal`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click
from rich.table import Table
from rich.text import Text

from ledgerflow.cli.json_input import json_option_value
from ledgerflow.cli.loading import db_option, load_registry, open_journal
from ledgerflow.cli.render import cell, console, inert, print_table, short, status_cell, when
from ledgerflow.model import names
from ledgerflow.model.definition import Registry
from ledgerflow.model.instance import InstanceStatus
from ledgerflow.operators.shapes import decoded, detail_json, listing, record_json
from ledgerflow.runtime.engine import SyncEngine
from ledgerflow.storage.records import (
    Delivery,
    EffectRecord,
    InstanceRecord,
    StepRecord,
    TimelineEntry,
)

LIST_LIMIT_DEFAULT = 50

F = TypeVar("F", bound=Callable[..., Any])

json_option: Callable[[F], F] = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON instead of tables."
)


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def _store_engine(db: str) -> SyncEngine:
    # Reading needs no workflow code: an empty registry is enough and pins nothing. The
    # journal is opened as it is: a read never creates or migrates one.
    return SyncEngine(open_journal(db), Registry())


def tenant_of(text: str | None) -> str | None:
    """A tenant given on the command line, checked by the one naming rule (None: not given)."""
    return None if text is None else names.tenant(text)


# -- start -------------------------------------------------------------------------------------


@click.command()
@click.argument("target", metavar="MODULE:OBJECT")
@click.argument("workflow")
@click.option("--key", required=True, help="Business key: starting it again returns the same.")
@click.option(
    "--input",
    "input_text",
    help="Workflow input as JSON, @FILE to read it from a file, or - for stdin (default: null).",
)
@click.option("--version", type=int, help="Definition version (default: the newest).")
@click.option("--tenant", help="Tenant (default: 'default').")
@click.option(
    "--wait",
    "wait_seconds",
    type=click.FloatRange(min=0),
    help="Wait up to SECONDS for the instance to end and print its result.",
)
@db_option
@json_option
def start(
    target: str,
    workflow: str,
    key: str,
    input_text: str | None,
    version: int | None,
    tenant: str | None,
    wait_seconds: float | None,
    db: str,
    as_json: bool,
) -> None:
    """Start WORKFLOW of MODULE:OBJECT for a business key, or find the one it already started.

    A repeated start with the same key, input and version returns the existing instance; the
    same key with another input or version is refused.
    """
    value = json_option_value(input_text, "--input")
    registry = load_registry(target)
    with SyncEngine(db, registry) as engine:
        started = engine.start(
            workflow, key=key, input=value, version=version, tenant=tenant_of(tenant)
        )
        instance = started.instance
        summary: dict[str, Any] = {
            "instance_id": instance.instance_id,
            "created": started.created,
            "workflow": instance.workflow_name,
            "version": instance.workflow_version,
            "business_key": instance.business_key,
            "tenant": instance.tenant,
            "status": instance.status.value,
        }
        if not as_json:
            verb = "created" if started.created else "already existed"
            console().print(
                Text.assemble(
                    (instance.instance_id, "bold"),
                    cell(
                        f"  {instance.workflow_name}@{instance.workflow_version}"
                        f"  key {instance.business_key!r}: {verb} ({instance.status.value})"
                    ),
                )
            )
        if wait_seconds is None:
            if as_json:
                echo_json(summary)
            return
        # Printed before waiting, so the instance id is known even if the wait times out.
        final = engine.wait(instance.instance_id, timeout=wait_seconds)
        summary["status"] = final.status.value
        if final.status is InstanceStatus.SUCCEEDED:
            summary["result"] = decoded(final.result)
        else:
            summary["reason_code"] = final.reason_code
            summary["reason"] = final.reason
        if as_json:
            # One document: the summary says how it ended; an ending without a result is
            # still a failure of the command.
            echo_json(summary)
            if final.status is not InstanceStatus.SUCCEEDED:
                raise SystemExit(1)
            return
        if final.status is InstanceStatus.SUCCEEDED:
            console().print(Text(json.dumps(summary["result"], indent=2, sort_keys=True)))
        # A run that ended otherwise is an error of the command: the engine says how it ended.
        engine.result(instance.instance_id, timeout=0)


# -- result ------------------------------------------------------------------------------------


@click.command()
@click.argument("instance_id", metavar="ID")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to wait for the instance to end (0: answer from the store now).",
)
@db_option
@json_option
def result(instance_id: str, timeout: float, db: str, as_json: bool) -> None:
    """Print the result of instance ID (exit 1 if it ended without one or is not done)."""
    with _store_engine(db) as engine:
        record = engine.wait(instance_id, timeout=timeout)
        if record.status is InstanceStatus.SUCCEEDED:
            value = decoded(record.result)
            if as_json:
                echo_json(
                    {
                        "instance_id": record.instance_id,
                        "status": record.status.value,
                        "result": value,
                    }
                )
            else:
                console().print(Text(json.dumps(value, indent=2, sort_keys=True)))
            return
        engine.result(instance_id, timeout=0)


# -- cancel ------------------------------------------------------------------------------------


@click.command()
@click.argument("instance_id", metavar="ID")
@click.option("--reason", required=True, help="Why; recorded with the request.")
@click.option(
    "--compensate/--no-compensate",
    default=True,
    show_default=True,
    help="Undo the confirmed effects (unless a forward-recovery-only one forbids it).",
)
@db_option
@json_option
def cancel(instance_id: str, reason: str, compensate: bool, db: str, as_json: bool) -> None:
    """Ask for instance ID to be cancelled (durable; repeating it changes nothing).

    The instance stops before its next step, finishes what was started, compensates if asked,
    and ends CANCELLED listing the effects that stay applied.
    """
    with _store_engine(db) as engine:
        record = engine.cancel(instance_id, reason=reason, compensate=compensate)
    if as_json:
        echo_json(
            {
                "instance_id": record.instance_id,
                "status": record.status.value,
                "cancel_requested_at": record.cancel_requested_at,
                "cancel_reason": record.cancel_reason,
                "compensate": record.cancel_compensate,
            }
        )
        return
    click.echo(
        inert(
            f"cancel requested for {record.instance_id} ({record.status.value}): "
            f"{record.cancel_reason}"
        )
    )


# -- list --------------------------------------------------------------------------------------


def instances_table(records: Iterable[InstanceRecord], *, title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("workflow")
    table.add_column("business key", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("reason")
    table.add_column("gen", justify="right")
    table.add_column("owner", overflow="fold")
    table.add_column("updated")
    for record in records:
        table.add_row(
            cell(record.instance_id),
            cell(f"{record.workflow_name}@{record.workflow_version}"),
            cell(record.business_key),
            status_cell(record.status),
            cell(record.reason_code),
            cell(record.generation),
            cell(record.owner),
            cell(when(record.updated_at)),
        )
    return table


@click.command("list")
@click.option(
    "--status",
    type=click.Choice([s.value for s in InstanceStatus], case_sensitive=False),
    help="Only instances in this status.",
)
@click.option("--workflow", help="Only instances of this workflow.")
@click.option("--tenant", help="Only instances of this tenant.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=LIST_LIMIT_DEFAULT,
    show_default=True,
    help="At most this many, newest first.",
)
@db_option
@json_option
def list_(
    status: str | None,
    workflow: str | None,
    tenant: str | None,
    limit: int,
    db: str,
    as_json: bool,
) -> None:
    """List instances, newest first."""
    with _store_engine(db) as engine:
        records = engine.list(
            status=InstanceStatus(status.upper()) if status else None,
            workflow=workflow,
            tenant=tenant_of(tenant),
            limit=limit,
        )
    if as_json:
        echo_json(listing([record_json(r) for r in records]))
        return
    out = console()
    if not records:
        out.print("no instances")
        return
    print_table(out, instances_table(records))


# -- show --------------------------------------------------------------------------------------


def header_table(instance: InstanceRecord) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    rows: list[tuple[str, Text]] = [
        ("instance", cell(instance.instance_id)),
        ("tenant", cell(instance.tenant)),
        ("business key", cell(instance.business_key)),
        ("workflow", cell(f"{instance.workflow_name}@{instance.workflow_version} (pinned)")),
        ("fingerprint", cell(instance.fingerprint)),
        ("run", cell(instance.run)),
        ("status", status_cell(instance.status)),
        ("reason", cell(" ".join(p for p in (instance.reason_code, instance.reason) if p))),
        ("owner", cell(instance.owner or "(none)")),
        ("generation", cell(instance.generation)),
        ("lease expires", cell(when(instance.lease_expires_at))),
        ("created", cell(when(instance.created_at))),
        ("updated", cell(when(instance.updated_at))),
        ("input", cell(short(instance.input, 120))),
        ("result", cell(short(instance.result, 120))),
    ]
    for name, value in rows:
        grid.add_row(name, value)
    return grid


def steps_table(steps: Iterable[StepRecord], *, title: str = "steps") -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("seq", justify="right")
    table.add_column("kind")
    table.add_column("name")
    table.add_column("status")
    table.add_column("att", justify="right")
    table.add_column("output / error", overflow="fold")
    for step in steps:
        table.add_row(
            cell(step.seq),
            cell(step.kind.value),
            cell(step.name),
            cell(step.status.value),
            cell(step.attempt),
            cell(short(step.error) if step.error else short(step.output)),
        )
    return table


def effects_table(effects: Iterable[EffectRecord], *, title: str = "effects") -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("seq", justify="right")
    table.add_column("effect")
    table.add_column("classification")
    table.add_column("idempotency key", overflow="fold")
    table.add_column("state")
    table.add_column("att", justify="right")
    table.add_column("evidence", overflow="fold")
    table.add_column("reason", overflow="fold")
    for effect in effects:
        table.add_row(
            cell(effect.seq),
            cell(f"{effect.participant}.{effect.operation}"),
            cell(effect.classification),
            cell(effect.idempotency_key),
            cell(effect.state.value),
            cell(effect.attempt),
            cell(short(effect.evidence, 40)),
            cell(short(effect.reason)),
        )
    return table


def timeline_table(entries: Iterable[TimelineEntry], *, title: str = "timeline") -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("time")
    table.add_column("gen", justify="right")
    table.add_column("subject")
    table.add_column("from -> to", overflow="fold")
    table.add_column("detail", overflow="fold")
    for entry in entries:
        table.add_row(
            cell(when(entry.at, precise=True)),
            cell(entry.generation),
            cell(entry.subject),
            cell(f"{entry.from_state or '-'} -> {entry.to_state}"),
            cell(short(entry.detail, 80)),
        )
    return table


def inbox_table(deliveries: Iterable[Delivery]) -> Table:
    table = Table(title="inbox", title_justify="left")
    table.add_column("received")
    table.add_column("event id", overflow="fold")
    table.add_column("name", overflow="fold")
    table.add_column("sender")
    table.add_column("state")
    table.add_column("reason", overflow="fold")
    for delivery in deliveries:
        table.add_row(
            cell(when(delivery.received_at, precise=True)),
            cell(delivery.event_id),
            cell(delivery.name),
            cell(delivery.sender),
            cell(delivery.state),
            cell(short(delivery.reason, 80)),
        )
    return table


@click.command()
@click.argument("instance_id", metavar="ID")
@db_option
@json_option
def show(instance_id: str, db: str, as_json: bool) -> None:
    """Show instance ID: its header, step and effect ledgers, inbox, timeline, open attention
    flags and the audit records of its repairs."""
    # Imported here: the repairs module builds on this one's tables and formatting.
    from ledgerflow.cli.repairs import audit_json, audit_table, flags_of

    with _store_engine(db) as engine:
        detail = engine.detail(instance_id)
        audit = engine.store.audit_records(instance_id=detail.instance.instance_id, limit=1000)
        flags = flags_of(engine.store, detail.instance.instance_id)
    if as_json:
        echo_json(
            {
                **detail_json(detail),
                "audit": [audit_json(a) for a in audit],
                "flags": [record_json(f) for f in flags],
            }
        )
        return
    out = console()
    out.print(header_table(detail.instance))
    out.print()
    if detail.steps:
        print_table(out, steps_table(detail.steps))
    else:
        out.print(Text("steps: none yet"))
    if detail.effects:
        print_table(out, effects_table(detail.effects))
    else:
        out.print(Text("effects: none"))
    if detail.inbox:
        print_table(out, inbox_table(detail.inbox))
    print_table(out, timeline_table(detail.timeline))
    if flags:
        out.print(cell("open flags: " + "; ".join(f"{f.reason_code}: {f.evidence}" for f in flags)))
    if audit:
        print_table(out, audit_table(audit, title="audit (repairs of this instance)"))


def register(group: click.Group) -> None:
    for command in (start, result, cancel, list_, show):
        group.add_command(command)
