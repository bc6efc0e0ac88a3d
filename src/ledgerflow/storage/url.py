"""Turn a store URL into a store (internal).

SQLite: ``sqlite:///relative.db``, ``sqlite:////absolute.db`` or a plain file path; options
``?synchronous=normal`` (the explicit, less durable setting) and ``?migrate=false``.
PostgreSQL: any libpq URL (``postgresql://``, ``postgres://`` or ``postgresql+psycopg://``, see
:mod:`ledgerflow.storage.postgres_url`); options ``?schema=name`` and ``?migrate=false``.

Migrations: by default opening a store creates the journal if it is missing and applies what
this Ledgerflow's schema needs, so a worker or a first ``start`` sets everything up. Where schema
changes go through review, ``?migrate=false`` in the URL (or ``open_store(url, migrate=False)``)
forbids it: the journal must exist and be current, and ``ledgerflow migrate --db URL`` is the one
explicit step that changes it. The caller's argument wins over the URL's option.

Every URL in a message is redacted (:func:`ledgerflow.redaction.redact`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from ledgerflow.errors import ConfigurationError, StoreNotFoundError
from ledgerflow.extras import require_extra
from ledgerflow.redaction import redact
from ledgerflow.storage.migrations import MigrationStatus, OnOpen, known
from ledgerflow.storage.store import Store

if TYPE_CHECKING:
    # Imported where used: each dialect loads its driver, and psycopg is an optional extra.
    from ledgerflow.storage.postgres import PostgresStore
    from ledgerflow.storage.sqlite import SqliteStore

SQLITE_OPTIONS = ("synchronous", "migrate")
POSTGRES_OPTIONS = ("schema", "migrate")
_POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg", "postgres+psycopg")
_FLAGS = {"true": True, "false": False}


def open_store(url: str, *, migrate: bool | None = None) -> Store:
    """The store at ``url``; ``migrate`` (default: the URL's ``migrate`` option, else True)
    says whether opening may create the journal and apply migrations."""
    return _open(url, migrate=migrate, inspect=False)


def migration_status(url: str) -> MigrationStatus:
    """Where the journal at ``url`` stands, without changing anything (``migrate --dry-run``)."""
    try:
        store = _open(url, migrate=False, inspect=True)
    except StoreNotFoundError as missing:
        path = missing.path
        if path is None:
            raise  # a PostgreSQL database: Ledgerflow creates schemas, never databases
        # A missing SQLite file is one that migrating would create.
        return MigrationStatus(
            where=str(path), exists=False, version=0, pending=tuple(known("sqlite"))
        )
    try:
        return store.migration_status()
    finally:
        store.close()


def _open(url: str, *, migrate: bool | None, inspect: bool) -> SqliteStore | PostgresStore:
    if "://" not in url:
        url = f"sqlite:///{url}"
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        rest, own = split_query(url, SQLITE_OPTIONS)
        return _sqlite(rest, own, _on_open(own, migrate, inspect, url))
    if scheme in _POSTGRES_SCHEMES:
        rest, own = split_query(url, POSTGRES_OPTIONS)
        return _postgres(rest, own, _on_open(own, migrate, inspect, url))
    raise ConfigurationError(
        f"unsupported store URL scheme {scheme!r} in {redact(url)} "
        "(use sqlite:///FILE or postgresql://...)"
    )


def _on_open(own: dict[str, str], migrate: bool | None, inspect: bool, url: str) -> OnOpen:
    if inspect:
        return OnOpen.INSPECT
    if migrate is None:
        text = own.get("migrate", "true")
        if text.lower() not in _FLAGS:
            raise ConfigurationError(
                f"migrate must be true or false, got {text!r} (in {redact(url)})"
            )
        migrate = _FLAGS[text.lower()]
    return OnOpen.MIGRATE if migrate else OnOpen.REQUIRE


def _sqlite(url: str, own: dict[str, str], on_open: OnOpen) -> SqliteStore:
    from ledgerflow.storage.sqlite import SqliteStore

    parts = urlsplit(url)
    if parts.query:
        names = sorted({piece.partition("=")[0] for piece in parts.query.split("&")})
        raise ConfigurationError(
            f"unknown SQLite option(s): {', '.join(names)} (known: {', '.join(SQLITE_OPTIONS)})"
        )
    path = url.split("://", 1)[1].split("?", 1)[0]
    path = path[1:] if path.startswith("/") else path
    if not path:
        raise ConfigurationError(f"store URL {redact(url)!r} names no file")
    if path == ":memory:":
        raise ConfigurationError(
            f"{path!r} is not a journal file: a journal must outlive the process and be shared "
            "by every worker, so name a file (sqlite:///orders.db)"
        )
    return SqliteStore(path, synchronous=own.get("synchronous", "full"), on_open=on_open)


def _postgres(url: str, own: dict[str, str], on_open: OnOpen) -> PostgresStore:
    require_extra("postgres", purpose="a PostgreSQL store")
    from ledgerflow.storage.postgres import PostgresStore
    from ledgerflow.storage.postgres_url import parse

    return PostgresStore(parse(url, own), on_open=on_open)


def split_query(url: str, names: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """``url`` without the query parameters in ``names``, and their values (the last wins).

    The parameters left are kept byte for byte: decoding and encoding them again would change
    what libpq reads (it decodes ``%XX`` only, never ``+``)."""
    head, mark, query = url.partition("?")
    kept: list[str] = []
    taken: dict[str, str] = {}
    for piece in filter(None, query.split("&")):
        name, _, value = piece.partition("=")
        if unquote(name) in names:
            taken[unquote(name)] = unquote(value)
        else:
            kept.append(piece)
    return (f"{head}{mark}{'&'.join(kept)}" if kept else head), taken
