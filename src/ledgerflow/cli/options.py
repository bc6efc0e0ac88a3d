"""The options many ``ledgerflow`` commands share, and how they read them (internal).

``--db`` names the journal (or ``LEDGERFLOW_DB``); ``--authority`` the authority file (or
``LEDGERFLOW_AUTHORITY``) for the commands that change something on someone's authority
(repairs, cancel, version moves and retirement); ``--json`` asks for one JSON document instead
of tables (:func:`echo_json` prints it); ``--limit`` bounds a listing; a ``--tenant`` is
checked by the one naming rule, as the library and the HTTP endpoint check it.

Who acts is never typed: with database access it is ``local:`` and the account the command
runs under (:func:`~ledgerflow.operators.service.local_actor`), held to the grants of the
authority file; with ``--token`` (or ``LEDGERFLOW_TOKEN``) the commands that can
(:func:`acting_options`) act through the HTTP API at ``--url`` (or ``LEDGERFLOW_URL``) as the
token's principal, held to its role and tenant. ``--actor``, which once named anyone, is
refused with that explanation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ledgerflow.cli.api_client import ApiClient
from ledgerflow.model import names
from ledgerflow.operators.authority import Authority

DB_ENVIRONMENT_VARIABLE = "LEDGERFLOW_DB"
AUTHORITY_ENVIRONMENT_VARIABLE = "LEDGERFLOW_AUTHORITY"
TOKEN_ENVIRONMENT_VARIABLE = "LEDGERFLOW_TOKEN"
URL_ENVIRONMENT_VARIABLE = "LEDGERFLOW_URL"

F = TypeVar("F", bound=Callable[..., Any])


class JournalUrl(click.types.StringParamType):
    """A journal's URL: when it is missing, the error says where else it can come from
    (issue 24: "Missing option '--db'" did not mention LEDGERFLOW_DB, which it reads)."""

    name = "url"

    def get_missing_message(self, param: click.Parameter, ctx: click.Context | None) -> str:
        return (
            f"Give the journal's URL (--db sqlite:///orders.db, --db postgresql://...) or set "
            f"{DB_ENVIRONMENT_VARIABLE}"
        )


db_option: Callable[[F], F] = click.option(
    "--db",
    "db",
    type=JournalUrl(),
    envvar=DB_ENVIRONMENT_VARIABLE,
    required=True,
    help=f"Store URL, e.g. sqlite:///orders.db or postgresql://user@host/db (or set "
    f"{DB_ENVIRONMENT_VARIABLE}).",
)

json_option: Callable[[F], F] = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON instead of tables."
)


def _no_actor(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        raise click.UsageError(
            "--actor is not taken any more: the command line acts as local:ACCOUNT (the "
            "account that runs it) or, with --token, as the token's principal "
            "(see docs/operators.md)"
        )


# Gone: a name anyone could type. Kept hidden only to say so instead of "no such option".
retired_actor_option: Callable[[F], F] = click.option(
    "--actor", hidden=True, expose_value=False, callback=_no_actor
)

authority_option: Callable[[F], F] = click.option(
    "--authority",
    "authority_file",
    envvar=AUTHORITY_ENVIRONMENT_VARIABLE,
    type=click.Path(dir_okay=False),
    help="Authority file (TOML): the grants of repairs and version commands to people; "
    "default: the built-in policy, which grants a person nothing (or set "
    f"{AUTHORITY_ENVIRONMENT_VARIABLE}).",
)


def acting_options(command: F) -> F:
    """``--db`` (not required then), ``--token`` and ``--url``: a command that can act either
    with database access or through the HTTP API as a token's principal."""
    for option in (
        click.option(
            "--db",
            "db",
            envvar=DB_ENVIRONMENT_VARIABLE,
            help=f"Store URL, e.g. sqlite:///orders.db or postgresql://user@host/db (or set "
            f"{DB_ENVIRONMENT_VARIABLE}); not used with --token.",
        ),
        click.option(
            "--token",
            envvar=TOKEN_ENVIRONMENT_VARIABLE,
            help="Act as this API token's principal, through the HTTP API at --url: its role "
            f"and tenant decide (or set {TOKEN_ENVIRONMENT_VARIABLE}).",
        ),
        click.option(
            "--url",
            envvar=URL_ENVIRONMENT_VARIABLE,
            help="The HTTP API a --token acts through (`ledgerflow serve`), e.g. "
            f"http://127.0.0.1:8080 (or set {URL_ENVIRONMENT_VARIABLE}).",
        ),
        retired_actor_option,
    ):
        command = option(command)
    return command


def api_of(*, db: str | None, token: str | None, url: str | None) -> ApiClient | None:
    """The API to act through when a token is given (None: act on the journal at ``db``)."""
    if token:
        if not url:
            raise click.UsageError(
                f"--token acts through the HTTP API: pass --url URL or set "
                f"{URL_ENVIRONMENT_VARIABLE}"
            )
        return ApiClient(url, token.strip())
    if not db:
        raise click.UsageError(
            f"Missing option '--db'. Give the journal's URL or set {DB_ENVIRONMENT_VARIABLE} "
            "(or act through the HTTP API with --token and --url)."
        )
    return None


def authority_of(authority_file: str | None) -> Authority:
    """The authority file named, or the built-in policy (it grants a person nothing)."""
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
