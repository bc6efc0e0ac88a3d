"""A PostgreSQL store URL is a libpq URL, plus Ledgerflow's own options (internal).

Whatever libpq accepts is accepted and passed through untouched: ``sslmode``, ``sslrootcert``,
``application_name``, ``connect_timeout``, ``target_session_attrs``, several ``host``\\s, a
socket folder as ``host=``, ``user=`` and ``password=`` in the query... psycopg's own parser
(:mod:`psycopg.conninfo`) reads the URL, so a parameter libpq does not know is refused by name
before any connection is tried, and nothing here second-guesses libpq. ``postgresql://``,
``postgres://`` and SQLAlchemy's ``postgresql+psycopg://`` spellings are all one thing.

Ledgerflow's own options ride in the same query and are taken out before libpq sees it:
``schema`` (default ``ledgerflow``) and ``migrate`` (see :mod:`ledgerflow.storage.url`).

The connection string keeps the password; what is ever shown is :attr:`PostgresTarget.display`,
the URL with the password redacted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ledgerflow import limits
from ledgerflow.errors import ConfigurationError
from ledgerflow.redaction import redact

SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "postgres+psycopg")
SCHEMA_DEFAULT = "ledgerflow"
# Sent before the user's own options (see parse): a user may still turn JIT on.
JIT_OFF = "-c jit=off"
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class PostgresTarget:
    """Where a PostgreSQL store lives and how to connect to it."""

    # For psycopg only: it holds the password. Never print it; print ``display``.
    conninfo: str
    display: str
    schema: str
    host: str
    dbname: str


def parse(url: str, own: dict[str, str]) -> PostgresTarget:
    """The target of ``url``, whose query still holds libpq's parameters; ``own`` are
    Ledgerflow's options, already taken out of it."""
    display = redact(url)
    schema = own.get("schema", SCHEMA_DEFAULT)
    if not _SCHEMA.match(schema):
        raise ConfigurationError(
            f"schema {schema!r} must be a lower-case SQL identifier (in {display})"
        )
    parts = urlsplit(url)
    libpq_url = urlunsplit(("postgresql", parts.netloc, parts.path, parts.query, parts.fragment))
    try:
        params = conninfo_to_dict(libpq_url)
    except psycopg.ProgrammingError as exc:
        raise ConfigurationError(
            f"{display} is not a PostgreSQL URL libpq accepts: {redact(str(exc))} (libpq "
            "parameters are accepted as they are, plus Ledgerflow's schema= and migrate=)"
        ) from None
    # The store's tables are found through search_path; a user's own server options stay.
    # JIT is off unless the user's options turn it on (theirs come later and win): the engine's
    # statements are short, and a claim's plan cost over a large backlog passes the JIT
    # threshold, which made every claim compile for about half a second (issue 29).
    settings = (JIT_OFF, str(params.pop("options", "")), f"-c search_path={schema}")
    options = " ".join(part for part in settings if part)
    params.setdefault("connect_timeout", str(limits.POSTGRES_CONNECT_TIMEOUT_SECONDS))
    return PostgresTarget(
        conninfo=make_conninfo("", **params, options=options),
        display=display,
        schema=schema,
        host=_where(params),
        dbname=str(params.get("dbname") or params.get("user") or ""),
    )


def _where(params: Mapping[str, object]) -> str:
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = params.get("port")
    return f"{host}:{port}" if port else host
