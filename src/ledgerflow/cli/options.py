"""The options many ``ledgerflow`` commands share, and how they read them (internal).

``--db`` names the journal (or ``LEDGERFLOW_DB``); ``--actor`` who acts (or
``LEDGERFLOW_OPERATOR``) and ``--authority`` the roles file (or ``LEDGERFLOW_AUTHORITY``) for
the commands that change something on someone's authority (repairs, cancel); ``--json`` asks
for one JSON document instead of tables (:func:`echo_json` prints it); ``--limit`` bounds a
listing; a ``--tenant`` is checked by the one naming rule, as the library and the HTTP endpoint
check it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ledgerflow.model import names
from ledgerflow.operators.authority import Authority

DB_ENVIRONMENT_VARIABLE = "LEDGERFLOW_DB"
OPERATOR_ENVIRONMENT_VARIABLE = "LEDGERFLOW_OPERATOR"
AUTHORITY_ENVIRONMENT_VARIABLE = "LEDGERFLOW_AUTHORITY"

F = TypeVar("F", bound=Callable[..., Any])

db_option: Callable[[F], F] = click.option(
    "--db",
    "db",
    envvar=DB_ENVIRONMENT_VARIABLE,
    required=True,
    help=f"Store URL, e.g. sqlite:///orders.db or postgresql://user@host/db (or set "
    f"{DB_ENVIRONMENT_VARIABLE}).",
)

json_option: Callable[[F], F] = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON instead of tables."
)


actor_option: Callable[[F], F] = click.option(
    "--actor",
    envvar=OPERATOR_ENVIRONMENT_VARIABLE,
    help=f"Who is acting, for the audit log (or set {OPERATOR_ENVIRONMENT_VARIABLE}).",
)

authority_option: Callable[[F], F] = click.option(
    "--authority",
    "authority_file",
    envvar=AUTHORITY_ENVIRONMENT_VARIABLE,
    type=click.Path(dir_okay=False),
    help="Roles file (TOML); default: the built-in policy, where no person holds a role (or set "
    f"{AUTHORITY_ENVIRONMENT_VARIABLE}).",
)


def required_actor(actor: str | None, *, doing: str) -> str:
    """The ``--actor`` of a command that changes something on someone's authority."""
    name = (actor or "").strip()
    if not name:
        raise click.UsageError(
            f"who is {doing}? pass --actor NAME or set {OPERATOR_ENVIRONMENT_VARIABLE}"
        )
    return name


def authority_of(authority_file: str | None) -> Authority:
    """The roles file named, or the built-in policy (no person holds a role)."""
    return Authority.from_file(authority_file) if authority_file else Authority.default()


def limit_option(*, default: int, text: str, maximum: int | None = None) -> Callable[[F], F]:
    """``--limit N``: at most N items (from 1 up to ``maximum``), ``default`` when not given."""
    return click.option(
        "--limit",
        type=click.IntRange(min=1, max=maximum),
        default=default,
        show_default=True,
        help=text,
    )


def echo_json(value: Any) -> None:
    """One JSON document on stdout, indented, keys sorted."""
    click.echo(json.dumps(value, indent=2, sort_keys=True))


def tenant_of(text: str | None) -> str | None:
    """A tenant given on the command line, checked by the one naming rule (None: not given)."""
    return None if text is None else names.tenant(text)
