"""``ledgerflow versions``: the definition versions in the journal, and retiring one with
evidence (internal).

``ledgerflow versions --db URL`` lists, per workflow, version and fingerprint, the instances
by status, the oldest one in flight (with its age) and whether the version is retired.
``ledgerflow versions retire W@N --db URL`` retires a version: refused while any instance that
has not ended is pinned to it, otherwise recorded with its evidence on the audit log; it needs
a grant that allows ``retire-version`` in the authority file (as ``local:ACCOUNT``) or, with
``--token``, a token with the admin role that sees every tenant (through the API). Other
subcommands of the group move in-flight work between code versions.
"""

from __future__ import annotations

import dataclasses
import time

import click
from rich.table import Table

from ledgerflow.cli.api_client import quoted
from ledgerflow.cli.options import (
    DB_ENVIRONMENT_VARIABLE,
    acting_options,
    api_of,
    authority_of,
    authority_option,
    echo_json,
    json_option,
)
from ledgerflow.cli.render import cell, console, inert, print_table, when
from ledgerflow.operators.service import Operations, VersionSummary, local_actor, parse_target
from ledgerflow.operators.shapes import listing

# The group lists by itself; --db is then required (it is checked in the group's body, as
# click cannot require an option only when no subcommand follows).
_LISTING_DB = click.option(
    "--db",
    "db",
    envvar=DB_ENVIRONMENT_VARIABLE,
    help=f"Store URL, e.g. sqlite:///orders.db (or set {DB_ENVIRONMENT_VARIABLE}).",
)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def _table(summaries: list[VersionSummary], *, now: float) -> Table:
    table = Table(title="versions", title_justify="left")
    for column in ("workflow", "version", "fingerprint", "instances by status", "in flight"):
        table.add_column(column, overflow="fold")
    table.add_column("oldest in flight", overflow="fold")
    table.add_column("served by live workers", overflow="fold")
    table.add_column("retired", overflow="fold")
    for s in summaries:
        oldest = ""
        if s.oldest_in_flight_id is not None and s.oldest_in_flight_at is not None:
            oldest = f"{s.oldest_in_flight_id} ({_age(now - s.oldest_in_flight_at)} old)"
        retired = f"yes, {when(s.retired_at)} by {s.retired_by}" if s.retired else "no"
        table.add_row(
            cell(s.workflow_name),
            cell(s.workflow_version),
            cell(s.fingerprint or "-"),
            cell(", ".join(f"{k} {v}" for k, v in s.statuses.items()) or "none"),
            cell(s.in_flight),
            cell(oldest or "-"),
            cell(", ".join(s.served_by) or "(no live worker)"),
            cell(retired),
        )
    return table


@click.group(invoke_without_command=True)
@_LISTING_DB
@json_option
@click.pass_context
def versions(ctx: click.Context, db: str | None, as_json: bool) -> None:
    """The definition versions in the journal: instances by status, the oldest in flight,
    whether retired. Subcommands change them."""
    if ctx.invoked_subcommand is not None:
        return
    if not db:
        raise click.UsageError("Missing option '--db'.")
    with Operations(db) as operations:
        summaries = operations.versions()
    now = time.time()
    if as_json:
        echo_json(listing([s.to_json(now=now) for s in summaries]))
        return
    if not summaries:
        console().print("no instances and no retired versions")
        return
    print_table(console(), _table(summaries, now=now))


@versions.command("retire")
@click.argument("target", metavar="WORKFLOW@N")
@click.option("--reason", default="", help="Why, for the audit log.")
@authority_option
@acting_options
@json_option
def retire(
    target: str,
    reason: str,
    authority_file: str | None,
    db: str | None,
    token: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Retire WORKFLOW@N: no new instance starts on it. Refused while any instance that has
    not ended is pinned to it; the evidence goes to the audit log. Needs a grant that allows
    ``retire-version`` held by local:ACCOUNT in the authority file, or with --token a token
    with the admin role that sees every tenant."""
    workflow, version = parse_target(target)
    api = api_of(db=db, token=token, url=url)
    why = reason or "retired"
    if api is not None:
        with api:
            path = f"/v1/versions/{quoted(workflow)}/{version}/retire"
            done = api.send("POST", path, {"reason": why})
        evidence = done["evidence"]
    else:
        assert db is not None
        with Operations(db, authority=authority_of(authority_file)) as operations:
            retired = operations.retire(workflow, version, reason=why, actor=local_actor())
        done = {"outcome": retired.outcome, "audit_id": retired.audit_id,
                "message": retired.message}  # fmt: skip
        evidence = dataclasses.asdict(retired.evidence)
    if as_json:
        echo_json(
            {
                **{k: done[k] for k in ("outcome", "audit_id", "message")},
                **{k: evidence[k] for k in ("statuses", "last_ended_id", "last_ended_at")},
            }
        )
        return
    click.echo(inert(f"{done['outcome']}: {done['message']} (audit record {done['audit_id']})"))


def register(cli: click.Group) -> None:
    cli.add_command(versions)
