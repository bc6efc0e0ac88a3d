"""PostgreSQL store URLs are libpq URLs, and a connection that cannot be made says why, at once.

Against the real server of ``LEDGERFLOW_TEST_POSTGRES_URL``. Each test works in a schema of its
own (``postgres_schema``). The failures are real ones: a database that does not exist, a role
that does not exist (the test server trusts every known role, so an unknown role is how it
refuses credentials), a port nothing listens on.
"""

from __future__ import annotations

import logging
import os
import time
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from ledgerflow.errors import (
    ConfigurationError,
    SchemaVersionError,
    StorageAccessError,
    StorageUnavailableError,
    StoreNotFoundError,
)
from ledgerflow.storage import open_store
from ledgerflow.storage.postgres import PostgresStore
from ledgerflow.storage.url import migration_status
from postgres_schema import ENVIRONMENT_VARIABLE, postgres_url

pytestmark = pytest.mark.postgres

SECRET = "pl4nted-S3cret"
# A failure to connect must be reported within this (the pool used to retry for 10 s).
FAST_SECONDS = 3.0


def _with(url: str, *, netloc: str | None = None, path: str | None = None) -> str:
    parts = urlsplit(url)
    return urlunsplit(
        parts._replace(
            netloc=parts.netloc if netloc is None else netloc,
            path=parts.path if path is None else path,
        )
    )


def _add(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


@pytest.fixture
def url(request: pytest.FixtureRequest) -> str:
    return postgres_url(request.node.name)


def _base() -> str:
    base = os.environ.get(ENVIRONMENT_VARIABLE)
    if not base:
        pytest.skip(f"PostgreSQL tests need {ENVIRONMENT_VARIABLE}")
    return base


def _setting(store: PostgresStore, sql: str) -> object:
    with store._connection() as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return next(iter(row.values()))


def test_libpq_parameters_pass_through(url: str) -> None:
    """Goal: every libpq parameter is accepted and reaches the connection (the bug: sslmode,
    application_name, host= and user= were refused as unknown options).

    Method: open with sslmode=disable, application_name, connect_timeout, options, and the
    host and user as query parameters on a URL that names neither; the server reports the
    application name, the user, and the session setting from options; the store's tables are
    still found through its schema.
    """
    parts = urlsplit(url)
    host, user = parts.hostname or "127.0.0.1", parts.username or "postgres"
    bare = _with(url, netloc=f":{parts.port or 5432}")
    full = _add(
        bare,
        f"host={host}&user={user}&sslmode=disable&application_name=lf-issue-15"
        "&connect_timeout=4&options=-c%20statement_timeout%3D12345",
    )
    store = open_store(full)
    assert isinstance(store, PostgresStore)
    try:
        assert _setting(store, "SELECT current_setting('application_name')") == "lf-issue-15"
        assert _setting(store, "SELECT current_user") == user
        assert _setting(store, "SELECT current_setting('statement_timeout')") == "12345ms"
        assert store.schema_version() > 0
    finally:
        store.close()


def test_sqlalchemy_spelling_and_a_refused_sslmode(url: str) -> None:
    """Goal: postgresql+psycopg:// is the same URL; sslmode reaches libpq (a server without
    SSL refuses sslmode=require with libpq's own reason, not "unknown option").

    Method: open the +psycopg spelling; then open with sslmode=require against the test server
    (which has no SSL): StorageUnavailableError naming SSL.
    """
    store = open_store(url.replace("postgresql://", "postgresql+psycopg://", 1))
    store.close()
    with pytest.raises(StorageUnavailableError, match="SSL"):
        open_store(_add(url, "sslmode=require"))


def test_an_unknown_parameter_is_refused_by_name(url: str) -> None:
    """Goal: a typo in a parameter is a configuration error naming it, before connecting.

    Method: open with ?sslmod=require: ConfigurationError naming "sslmod".
    """
    with pytest.raises(ConfigurationError, match="sslmod"):
        open_store(_add(url, "sslmod=require"))


@pytest.mark.parametrize(
    ("kind", "expected", "words"),
    [
        ("missing-database", StoreNotFoundError, "no database 'lf_no_such_database'"),
        ("unknown-role", StorageAccessError, "refused the credentials"),
        ("refused-connection", StorageUnavailableError, "Connection refused"),
    ],
)
def test_a_failed_connection_is_named_by_its_cause_at_once(
    kind: str, expected: type[Exception], words: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Goal: a missing database, refused credentials and a server that is not there are three
    different errors, each reported at once in one line with the password redacted, and the
    pool's warnings do not repeat it (the bug: 10 s of silence, then "pool initialization
    incomplete" after four identical pool warnings).

    Method: a URL with a planted password for each failure; the error class, its words and
    its time; nothing logged by psycopg's pool; the password in neither.
    """
    parts = urlsplit(_base())
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    user = "lf_no_such_role" if kind == "unknown-role" else (parts.username or "postgres")
    port = 1 if kind == "refused-connection" else port
    database = "lf_no_such_database" if kind == "missing-database" else parts.path
    planted = _with(
        _base(), netloc=f"{user}:{SECRET}@{host}:{port}", path=f"/{database.lstrip('/')}"
    )
    caplog.set_level(logging.DEBUG)
    began = time.monotonic()
    with pytest.raises(expected) as refused:
        open_store(planted)
    assert time.monotonic() - began < FAST_SECONDS
    text = str(refused.value)
    assert words in text
    assert "\n" not in text
    assert SECRET not in text
    assert [r for r in caplog.records if r.name.startswith("psycopg")] == []


def test_the_store_shows_its_url_without_the_password(url: str) -> None:
    """Goal: the URL a store shows (the worker prints it) never holds the password.

    Method: plant a password in the user part and a password= parameter; the store's url has
    neither, and still names the host and the database.
    """
    parts = urlsplit(url)
    user = parts.username or "postgres"
    planted = _with(url, netloc=f"{user}:{SECRET}@{parts.hostname}:{parts.port or 5432}")
    for candidate in (planted, _add(url, f"password={SECRET}")):
        store = open_store(candidate)
        try:
            assert SECRET not in store.url
            assert str(parts.hostname) in store.url
        finally:
            store.close()


def test_migration_off_refuses_a_schema_that_is_not_there(url: str) -> None:
    """Goal: with ?migrate=false nothing is created: a schema never migrated is refused with
    the way out, and is still not there afterwards; migration_status says what would be done.

    Method: open a fresh schema with ?migrate=false: SchemaVersionError naming `ledgerflow
    migrate`; the schema does not exist in the catalog; the status lists every migration.
    """
    with pytest.raises(SchemaVersionError, match="ledgerflow migrate"):
        open_store(_add(url, "migrate=false"))
    schema = url.rsplit("schema=", 1)[1]
    with psycopg.connect(_base()) as conn:
        found = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    assert found == (0,)
    status = migration_status(url)
    assert status.version == 0
    assert [m.number for m in status.pending] == list(range(1, len(status.pending) + 1))
