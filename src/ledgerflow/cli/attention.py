"""``ledgerflow attention``: the operator's queue from the command line (internal).

Lists parked instances and open flags, oldest first, with the reason code, the reason or the
evidence, and what must be settled (effects in doubt, failed compensations). ``--scan`` first
runs the stuck-work scan that workers run periodically, with the bounds of
``LEDGERFLOW_DETECTION``, and says what it raised and cleared. Reading needs no workflow code.
"""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from ledgerflow import limits
from ledgerflow.cli.options import db_option, echo_json, json_option, limit_option, tenant_of
from ledgerflow.cli.render import cell, console, inert, lines_cell, print_table, short, when
from ledgerflow.operators.service import AttentionItem, AttentionQuery, Operations, ScanReport
from ledgerflow.operators.shapes import listing

_REASON_CHARS = 160


def _table(items: list[AttentionItem]) -> Table:
    table = Table(title="needs attention (oldest first)", title_justify="left")
    for name in ("since", "kind", "instance", "workflow", "tenant", "status", "reason code"):
        table.add_column(name, overflow="fold")
    table.add_column("reason / evidence", overflow="fold")
    table.add_column("to settle", overflow="fold")
    for item in items:
        settle = [f"in doubt: {e}" for e in item.effects_in_doubt]
        settle += [f"compensation failed: {c}" for c in item.failed_compensations]
        table.add_row(
            cell(when(item.since)),
            Text(item.kind, style="bold red" if item.kind == "parked" else "yellow"),
            cell(item.instance_id),
            cell(item.workflow_name),
            cell(item.tenant),
            cell(item.status),
            cell(item.reason_code),
            cell(short(item.reason, _REASON_CHARS)),
            lines_cell(settle),
        )
    return table


def _scan_summary(report: ScanReport) -> str:
    parts = [f"scan: {len(report.raised)} flag(s) raised, {report.still_open} still open"]
    parts.append(f"{len(report.cleared)} cleared")
    if report.requeued:
        parts.append(f"{len(report.requeued)} repaired row(s) due again")
    if report.truncated:
        parts.append(f"bound reached for {', '.join(report.truncated)}")
    return ", ".join(parts)


@click.command("attention")
@click.option("--tenant", help="Only this tenant.")
@click.option("--workflow", help="Only this workflow.")
@click.option("--reason", "reason_code", metavar="CODE", help="Only this reason code.")
@limit_option(
    default=limits.ATTENTION_LIMIT_DEFAULT,
    maximum=limits.ATTENTION_LIMIT_MAX,
    text="At most this many, oldest first.",
)
@click.option("--scan", "run_scan", is_flag=True, help="Scan for stuck work first.")
@db_option
@json_option
def attention_command(
    tenant: str | None,
    workflow: str | None,
    reason_code: str | None,
    limit: int,
    run_scan: bool,
    db: str,
    as_json: bool,
) -> None:
    """List what needs a person: parked instances and open flags, oldest first."""
    with Operations(db) as operations:
        report = operations.scan(detected_by="cli") if run_scan else None
        query = AttentionQuery(
            tenant=tenant_of(tenant), workflow=workflow, reason=reason_code, limit=limit
        )
        items = operations.attention(query)
    if as_json:
        document = listing([item.to_json() for item in items])
        if report is not None:
            document["scan"] = {
                "raised": [
                    {"instance_id": f.instance_id, "reason_code": f.reason_code}
                    for f in report.raised
                ],
                "still_open": report.still_open,
                "cleared": [{"instance_id": i, "reason_code": r} for i, r in report.cleared],
                "requeued": list(report.requeued),
            }
        echo_json(document)
        return
    out = console()
    if report is not None:
        click.echo(inert(_scan_summary(report)))
    if not items:
        out.print("nothing needs attention")
        return
    print_table(out, _table(items))


def register(group: click.Group) -> None:
    group.add_command(attention_command)
