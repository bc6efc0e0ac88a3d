"""``ledgerflow flow``: flow control on effects from the command line (internal).

``limits`` lists the effect limits, ``throttled`` the attempts waiting THROTTLED now (since
when, why, until when), ``set PARTICIPANT.OPERATION`` sets a limit and ``remove`` removes
one; each change is on the audit log against local:ACCOUNT, in the change's own transaction.
No workflow code is needed.
"""

from __future__ import annotations

import click
from rich.table import Table

from ledgerflow.cli.options import db_option, echo_json, json_option
from ledgerflow.cli.render import cell, console, print_table
from ledgerflow.errors import CommandLineError
from ledgerflow.operators.flow import limit_json
from ledgerflow.operators.service import Operations


def _operation(text: str) -> tuple[str, str]:
    participant, dot, operation = text.partition(".")
    if not dot or not participant or not operation:
        raise CommandLineError(f"name the operation as PARTICIPANT.OPERATION, got {text!r}")
    return participant, operation


def _weights(given: tuple[str, ...]) -> dict[str, float]:
    weights: dict[str, float] = {}
    for text in given:
        key, equals, value = text.rpartition("=")
        try:
            weights[key] = float(value)
        except ValueError:
            key = ""
        if not equals or not key:
            raise CommandLineError(f"give a weight as KEY=NUMBER, got {text!r}")
    return weights


@click.group("flow")
def flow_group() -> None:
    """Flow control on effects: limits, THROTTLED attempts, set and remove a limit."""


@flow_group.command("limits")
@db_option
@json_option
def limits_command(db: str, as_json: bool) -> None:
    """List the effect limits: concurrency, rate and burst, and what they are counted per."""
    with Operations(db) as operations:
        found = [limit_json(lim) for lim in operations.flow().limits()]
    if as_json:
        echo_json({"items": found})
        return
    table = Table(title="effect limits", title_justify="left")
    for name in ("scope", "concurrency", "rate/s", "burst", "per", "fair by", "weights"):
        table.add_column(name, overflow="fold")
    for lim in found:
        weights = ", ".join(f"{k}={w:g}" for k, w in lim["weights"].items())
        table.add_row(*(cell(lim[k]) for k in ("scope", "concurrency_max", "rate_per_second")),
                      cell(lim["burst"]), cell(lim["per"] or "(all)"),
                      cell(lim["fair_by"] or "-"), cell(weights or "-"))  # fmt: skip
    print_table(console(), table)


@flow_group.command("throttled")
@db_option
@json_option
def throttled_command(db: str, as_json: bool) -> None:
    """List the effect attempts waiting THROTTLED (never sent, their timeout not started), each
    limit's key in the order they are admitted: priority, fairness, arrival."""
    with Operations(db) as operations:
        found = operations.flow().throttled()
    if as_json:
        echo_json({"items": found})
        return
    out = console()
    if not found:
        out.print("no effect is throttled")
        return
    table = Table(title="throttled effects", title_justify="left")
    for name in ("instance", "scope", "key", "attempt", "priority", "fair key", "why", "waited"):
        table.add_column(name, overflow="fold")
    for a in found:
        table.add_row(
            *(cell(a[k]) for k in ("instance_id", "scope", "flow_key", "attempt", "priority")),
            cell(a["fairness_key"]),
            cell(a["reason"]),
            cell(f"{a['throttled_seconds']:.1f}s"),
        )
    print_table(out, table)


@flow_group.command("set")
@click.argument("operation")
@db_option
@click.option("--concurrency", type=click.IntRange(min=0), default=None)
@click.option("--rate", type=float, default=None, help="Dispatches per second (a GCRA).")
@click.option("--burst", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--per", default=None, help="'tenant', 'input.<path>', or none: one key for all.")
@click.option("--fair-by", default=None, help="Share fairly by 'tenant' or 'input.<path>'.")
@click.option("--weight", "weights", multiple=True, metavar="KEY=WEIGHT",
              help="A fairness key's weight (default 1); repeat for several.")  # fmt: skip
@click.option("--reason", default="", help="Why, for the audit log.")
def set_command(operation: str, db: str, concurrency: int | None, rate: float | None,
                burst: int, per: str | None, fair_by: str | None, weights: tuple[str, ...],
                reason: str) -> None:  # fmt: skip
    """Set the limit of PARTICIPANT.OPERATION across every worker (audited)."""
    participant, name = _operation(operation)
    with Operations(db) as operations:
        limit = operations.flow().set(
            participant, name, concurrency_max=concurrency, rate_per_second=rate, burst=burst,
            per=per, fair_by=fair_by, weights=_weights(weights), reason=reason,
        )  # fmt: skip
    click.echo(f"set {limit.scope}")


@flow_group.command("remove")
@click.argument("operation")
@db_option
@click.option("--reason", default="", help="Why, for the audit log.")
def remove_command(operation: str, db: str, reason: str) -> None:
    """Remove the limit of PARTICIPANT.OPERATION (audited)."""
    participant, name = _operation(operation)
    with Operations(db) as operations:
        had = operations.flow().remove(participant, name, reason=reason)
    click.echo(f"removed {operation}" if had else f"{operation} had no limit")


def register(group: click.Group) -> None:
    group.add_command(flow_group)
