"""``ledgerflow tokens create|list|revoke``: the API's and the console's credentials (internal).

A token is made here, by whoever can open the journal (the database's own credentials are the
authority to mint one), and printed exactly once: the journal keeps only its hash. ``list``
shows every token, revoked ones too, never a secret; every cell is inert, so a token name
holding terminal escapes cannot act on the operator's screen. Making and revoking a token is on
the audit log, against ``local:ACCOUNT``, the account that runs the command.
"""

from __future__ import annotations

import click
from rich.table import Table

from ledgerflow.cli.options import db_option, echo_json, json_option, retired_actor_option
from ledgerflow.cli.render import cell, console, inert, print_table, when
from ledgerflow.operators.service import ALL_TENANTS, ApiRole, ApiToken, Operations, local_actor
from ledgerflow.operators.shapes import listing


def _token_json(token: ApiToken) -> dict[str, object]:
    return {
        "token_id": token.token_id,
        "name": token.name,
        "role": token.role,
        "tenant": token.tenant,
        "created_at": token.created_at,
        "created_by": token.created_by,
        "revoked_at": token.revoked_at,
        "revoked_by": token.revoked_by,
    }


@click.group()
def tokens() -> None:
    """API tokens for `ledgerflow serve` (the HTTP API and the console)."""


@tokens.command("create")
@click.option("--name", required=True, help="The principal the token acts as (the audit's actor).")
@click.option(
    "--role",
    required=True,
    type=click.Choice([r.value for r in ApiRole]),
    help="viewer < signaller < operator < admin (see docs/http-api.md).",
)
@click.option(
    "--tenant",
    required=True,
    help=f"The one tenant it sees and touches ({ALL_TENANTS!r}: every tenant, admin only).",
)
@retired_actor_option
@db_option
@json_option
def create(name: str, role: str, tenant: str, db: str, as_json: bool) -> None:
    """Make a token and print it once: it cannot be shown again, only revoked. A name is one
    live token (revoke the old one to replace it); Ledgerflow's own names are refused."""
    with Operations(db) as operations:
        text, token = operations.tokens().create(
            name=name, role=role, tenant=tenant, created_by=local_actor()
        )
    if as_json:
        echo_json({**_token_json(token), "token": text})
        return
    click.echo(text)
    click.echo(
        inert(
            f"token {token.token_id} for {token.name} ({token.role}, tenant {token.tenant}): "
            "keep it now, it is not stored and will not be shown again"
        ),
        err=True,
    )


@tokens.command("list")
@db_option
@json_option
def list_(db: str, as_json: bool) -> None:
    """Every token, oldest first, revoked ones too (never a secret)."""
    with Operations(db) as operations:
        found = operations.tokens().list()
    if as_json:
        echo_json(listing([_token_json(t) for t in found]))
        return
    if not found:
        console().print("no tokens")
        return
    table = Table(title="tokens", title_justify="left")
    for column in ("id", "name", "role", "tenant", "created", "by", "revoked"):
        table.add_column(column, overflow="fold")
    for token in found:
        revoked = f"{when(token.revoked_at)} by {token.revoked_by}" if token.revoked_at else ""
        table.add_row(
            cell(token.token_id),
            cell(token.name),
            cell(token.role),
            cell(token.tenant),
            cell(when(token.created_at)),
            cell(token.created_by),
            cell(revoked),
        )
    print_table(console(), table)


@tokens.command("revoke")
@click.argument("token_id", metavar="TOKEN_ID")
@retired_actor_option
@db_option
@json_option
def revoke(token_id: str, db: str, as_json: bool) -> None:
    """Revoke a token (its id, from `tokens list`): requests and console sessions with it stop
    at once. Revoking it again changes nothing."""
    with Operations(db) as operations:
        token = operations.tokens().revoke(token_id, revoked_by=local_actor())
    if as_json:
        echo_json(_token_json(token))
        return
    click.echo(inert(f"token {token.token_id} ({token.name}) revoked"))


def register(group: click.Group) -> None:
    group.add_command(tokens)
