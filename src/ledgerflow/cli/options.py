"""The options many ``ledgerflow`` commands share, and how they read them (internal).

``--db`` names the journal (or ``LEDGERFLOW_DB``); ``--json`` asks for one JSON document
instead of tables (:func:`echo_json` prints it); ``--limit`` bounds a listing; a ``--tenant``
is checked by the one naming rule, as the library and the HTTP endpoint check it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ledgerflow.model import names

DB_ENVIRONMENT_VARIABLE = "LEDGERFLOW_DB"

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
