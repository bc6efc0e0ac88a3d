"""``ledgerflow schedule``: the journal's schedules from the command line (internal).

``list`` and ``show NAME`` (its spec, cursor and latest decided slots with their outcomes and
reasons) need no workflow code; ``pause``, ``resume`` and ``delete`` neither. ``trigger`` and
``backfill`` start workflows, so they load MODULE:OBJECT (the registry) like ``start``. Every
change is on the audit log against local:ACCOUNT, in the change's own transaction.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import click
from rich.table import Table

from ledgerflow.cli.loading import load_registry
from ledgerflow.cli.options import db_option, echo_json, json_option
from ledgerflow.cli.render import cell, console, print_table
from ledgerflow.errors import CommandLineError
from ledgerflow.operators.schedules import iso_utc, schedule_json, slot_json
from ledgerflow.operators.service import Operations, local_actor


def _instant(text: str, option: str) -> float:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CommandLineError(f"{option}: not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        raise CommandLineError(f"{option}: give the time zone, e.g. {text}Z")
    return moment.timestamp()


@click.group("schedule")
def schedule_group() -> None:
    """The journal's schedules: list, show, pause, resume, trigger, backfill, delete."""


@schedule_group.command("list")
@db_option
@json_option
def list_command(db: str, as_json: bool) -> None:
    """List the schedules: spec, next slot, paused."""
    with Operations(db) as operations:
        found = operations.schedules().every()
    if as_json:
        echo_json({"items": [schedule_json(s) for s in found]})
        return
    table = Table(title="schedules", title_justify="left")
    for name in ("name", "workflow", "when", "tz", "next slot", "paused", "overlap", "catch-up"):
        table.add_column(name, overflow="fold")
    for s in found:
        row = schedule_json(s)
        when = row["cron"] or f"every {row['every_seconds']:g}s"
        table.add_row(
            *(cell(v) for v in (s.name, row["workflow"], when, row["tz"], row["next_slot"])),
            cell("yes" if s.paused else "no"),
            cell(row["overlap"]),
            cell(row["catch_up"]),
        )
    print_table(console(), table)


@schedule_group.command("show")
@click.argument("name")
@db_option
@json_option
def show_command(name: str, db: str, as_json: bool) -> None:
    """A schedule and its latest decided slots, each with its outcome and reason."""
    with Operations(db) as operations:
        view = operations.schedules().show(name)
    shown = {**schedule_json(view.schedule), "slots": [slot_json(s) for s in view.slots]}
    if as_json:
        echo_json(shown)
        return
    out = console()
    for key, value in shown.items():
        if key != "slots":
            out.print(f"{key}: {value}")
    table = Table(title="latest slots", title_justify="left")
    for column in ("nominal (UTC)", "version", "outcome", "reason", "instance"):
        table.add_column(column, overflow="fold")
    for s in shown["slots"]:
        table.add_row(
            *(cell(s[k]) for k in ("nominal_at", "spec_version", "outcome", "reason")),
            cell(s["instance_id"] or ""),
        )
    print_table(out, table)


def _change(what: str) -> Any:
    @click.argument("name")
    @db_option
    @click.option("--reason", default="", help="Why, for the audit record.")
    def command(name: str, db: str, reason: str) -> None:
        with Operations(db) as operations:
            changed = getattr(operations.schedules(local_actor()), what)(name, reason=reason)
        click.echo(f"schedule {name}: {what}d" if changed else f"schedule {name}: no change")

    command.__doc__ = f"{what.capitalize()} a schedule (audited)."
    return command


schedule_group.command("pause")(_change("pause"))
schedule_group.command("resume")(_change("resume"))
schedule_group.command("delete")(_change("delete"))


@schedule_group.command("trigger")
@click.argument("target", metavar="MODULE:OBJECT")
@click.argument("name")
@db_option
@click.option("--request-id", default=None, help="The trigger's id (repeat-safe); default new.")
@click.option("--reason", default="", help="Why, for the audit record.")
@json_option
def trigger_command(
    target: str, name: str, db: str, request_id: str | None, reason: str, as_json: bool
) -> None:
    """Start NAME's workflow now, under the trigger's own key: it takes no slot."""
    registry = load_registry(target)
    request = request_id or uuid.uuid4().hex
    with Operations(db, registry=registry) as operations:
        started = operations.schedules(local_actor()).trigger(
            name, request_id=request, reason=reason
        )
    instance = started.instance
    if as_json:
        echo_json({"instance_id": instance.instance_id, "created": started.new})
        return
    state = "started" if started.new else "already started"
    click.echo(f"{instance.instance_id} {state} (key {instance.business_key})")


@schedule_group.command("backfill")
@click.argument("target", metavar="MODULE:OBJECT")
@click.argument("name")
@db_option
@click.option("--from", "start", required=True, help="ISO 8601 start (exclusive), e.g. …Z.")
@click.option("--to", "end", required=True, help="ISO 8601 end (inclusive).")
@click.option("--reason", default="", help="Why, for the audit record.")
@json_option
def backfill_command(
    target: str, name: str, db: str, start: str, end: str, reason: str, as_json: bool
) -> None:
    """Fire the past slots of NAME no tick decided, by the spec in force at each; run twice,
    it adds nothing."""
    registry = load_registry(target)
    low, high = _instant(start, "--from"), _instant(end, "--to")
    with Operations(db, registry=registry) as operations:
        done = operations.schedules(local_actor()).backfill(
            name, start=low, end=high, reason=reason
        )
    if as_json:
        echo_json({"fired": [iso_utc(n) for n in done.fired], "kept": done.kept})
        return
    click.echo(f"backfill {name}: {len(done.fired)} fired, {done.kept} already decided")


def register(group: click.Group) -> None:
    group.add_command(schedule_group)
