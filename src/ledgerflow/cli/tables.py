"""The ledgers as terminal tables: instances, their journal, timeline and inbox, and the audit
log (internal).

Every command that prints a ledger prints it with these, so that ``list``, ``show``, ``audit``
and the demo read the same; each cell goes through :func:`~ledgerflow.cli.render.cell`, so what
the ledger holds is shown inert.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from ledgerflow import (
    Delivery,
    EffectRecord,
    InstanceRecord,
    Published,
    RunRecord,
    StepRecord,
    TimelineEntry,
)
from ledgerflow.cli.render import cell, lines_cell, short, status_cell, when
from ledgerflow.model.attempts import attempt_errors
from ledgerflow.operators.service import AuditRecord
from ledgerflow.operators.shapes import record_json


def steps_cell(steps: Sequence[StepRecord]) -> Text:
    """An instance's steps, one line each: the lines are the demo's own layout, so they are
    joined after each one is made inert (a newline inside a name would still show as ``\\x0a``).
    """
    return lines_cell(
        [
            f"{s.seq} {s.name} {s.status.value}"
            + (f" (attempt {s.attempt})" if s.attempt > 1 else "")
            for s in steps
        ]
    )


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
        *((("cause", cell(instance.cause)),) if instance.cause else ()),
        *((("cancel", cell(_cancel_line(instance))),) if instance.cancel_requested_at else ()),
        *((("parent", cell(_parent_line(instance))),) if instance.parent_instance_id else ()),
        ("owner", cell(instance.owner or "(none)")),
        ("generation", cell(instance.generation)),
        ("lease expires", cell(when(instance.lease_expires_at))),
        ("created", cell(when(instance.created_at))),
        ("updated", cell(when(instance.updated_at))),
        ("input", cell(short(instance.input, 120))),
        *(
            (("run input", cell(short(instance.run_input, 120))),)
            if instance.run_input is not None
            else ()
        ),
        ("result", cell(short(instance.result, 120))),
    ]
    for name, value in rows:
        grid.add_row(name, value)
    return grid


def _parent_line(instance: InstanceRecord) -> str:
    return (
        f"{instance.parent_instance_id} (run {instance.parent_run}, step {instance.parent_seq}); "
        f"ledgerflow show {instance.parent_instance_id}"
    )


def children_table(children: Iterable[InstanceRecord]) -> Table:
    """The child workflows an instance started, oldest first."""
    table = Table(title="children (ledgerflow show CHILD_ID)", title_justify="left")
    for column in ("step", "child", "workflow", "business key", "status"):
        table.add_column(column, justify="right" if column == "step" else "left")
    for child in children:
        table.add_row(
            cell(child.parent_seq),
            cell(child.instance_id),
            cell(f"{child.workflow_name}@{child.workflow_version}"),
            cell(child.business_key),
            status_cell(child.status),
        )
    return table


def values_table(values: Iterable[Published]) -> Table:
    """What the instance published (``ctx.publish``; an update's reply is ``update:ID``)."""
    table = Table(title="published values", title_justify="left")
    for column in ("name", "version", "value", "run", "step", "published"):
        table.add_column(
            column, justify="right" if column in ("version", "run", "step") else "left"
        )
    for value in values:
        table.add_row(
            cell(value.name), cell(value.version), cell(value.value_text), cell(value.run),
            cell(value.seq), cell(when(value.published_at)),
        )  # fmt: skip
    return table


def _cancel_line(instance: InstanceRecord) -> str:
    asked = f"requested {when(instance.cancel_requested_at)}: {instance.cancel_reason}"
    outcome = instance.cancel_outcome or "open"
    return f"{asked} ({'compensate' if instance.cancel_compensate else 'keep effects'}); {outcome}"


def attempt_errors_table(
    steps: Iterable[StepRecord], effects: Iterable[EffectRecord]
) -> Table | None:
    """Every failed attempt's error that steps and effects kept, oldest first; None if none."""
    table = Table(title="failed attempts", title_justify="left")
    table.add_column("seq", justify="right")
    table.add_column("name")
    table.add_column("att", justify="right")
    table.add_column("at")
    table.add_column("error", overflow="fold")
    rows = [(s.seq, s.name, s.attempt_errors) for s in steps]
    rows += [(e.seq, f"{e.participant}.{e.operation}", e.attempt_errors) for e in effects]
    shown = False
    for seq, name, kept in rows:
        for entry in attempt_errors(kept):
            shown = True
            dropped = entry.get("dropped_after")
            error = f"{entry.get('type')}: {entry.get('message')}"
            table.add_row(
                cell(seq),
                cell(name),
                cell(entry.get("attempt")),
                cell(when(entry.get("at"))),
                cell(short(error) + (f" (then {dropped} not kept)" if dropped else "")),
            )
    return table if shown else None


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
        name = f"{effect.participant}.{effect.operation}"
        if effect.contract_version is not None:
            name += f" (contract {effect.contract_version})"
        table.add_row(
            cell(effect.seq),
            cell(name),
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


def runs_table(runs: Sequence[RunRecord], *, open_run: int) -> Table:
    """The runs an instance closed by continuing as new (the latest ones), then its open one."""
    shown = f"the latest {len(runs)} of {open_run - 1}" if len(runs) < open_run - 1 else "all"
    table = Table(title=f"runs (closed by continue-as-new: {shown})", title_justify="left")
    table.add_column("run", justify="right")
    table.add_column("steps", justify="right")
    table.add_column("closed")
    table.add_column("input", overflow="fold")
    for run in runs:
        table.add_row(
            cell(run.run), cell(run.steps), cell(when(run.closed_at)), cell(short(run.input, 80))
        )
    table.add_row(cell(open_run), cell("-"), cell("(open)"), cell(""))
    return table


def audit_json(record: AuditRecord) -> dict[str, Any]:
    """An audit record; its plan is decoded like every JSON field of a record."""
    return record_json(record)


def audit_table(records: Iterable[AuditRecord], *, title: str = "audit") -> Table:
    table = Table(title=title, title_justify="left")
    # "allowed by": the authority file's grant, or the token's role, that allowed it.
    for name in ("#", "time", "actor", "allowed by", "kind", "instance", "target", "outcome"):
        table.add_column(name, overflow="fold")
    table.add_column("gen", justify="right")
    table.add_column("reason / refusal", overflow="fold")
    for r in records:
        generations = (
            f"{r.generation_before}->{r.generation_after}"
            if r.generation_before is not None
            else ""
        )
        table.add_row(
            cell(r.audit_id),
            cell(when(r.at)),
            cell(r.actor),
            cell(r.role),
            cell(r.kind),
            cell(r.instance_id),
            cell(r.target),
            cell(r.outcome),
            cell(generations),
            cell(short(r.reason + (f" | {r.refusal}" if r.refusal else ""), 100)),
        )
    return table
