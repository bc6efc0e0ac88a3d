"""Errors of the store: unavailable, damaged, foreign, at another schema version, missing,
or refusing the credentials (internal: import errors from :mod:`ledgerflow.errors`)."""

from __future__ import annotations

from typing import ClassVar

from ledgerflow.errors.base import LedgerflowError, identities


@identities
class StorageError(LedgerflowError):
    """The store could not do what was asked."""

    code = "LF200"
    ID_NAMES: ClassVar[tuple[str, ...]] = ("path",)

    # The SQLite file concerned (PostgreSQL errors name their URL in the message).
    path: str | None = None


class StorageUnavailableError(StorageError):
    """The store is busy or unreachable; the operation may be tried again."""

    code = "LF201"


@identities
class StorageCorruptError(StorageError):
    """The database file cannot be read as a database."""

    code = "LF202"
    ID_NAMES = ("path", "row")

    # The key of a row that breaks a ledger invariant (instance, step or effect id).
    row: str | None = None


class ForeignDatabaseError(StorageError):
    """The database holds tables that are not Ledgerflow's; it was not modified."""

    code = "LF203"


class ForeignConnectionError(ForeignDatabaseError):
    """A connection lent to the engine (``engine.within(connection)``) is not to the engine's
    own journal: another database or server, another SQLite file, or a SQLite connection with
    other files ATTACHed (a commit across attached WAL files is atomic per file only). Nothing
    was written through it."""

    code = "LF315"


class SchemaVersionError(StorageError):
    """The schema is not the one this Ledgerflow uses (newer, older and not to be migrated
    here, or missing), or its migration history was altered."""

    code = "LF204"


class StoreNotFoundError(StorageError):
    """There is no journal where the URL points: no such file, or no such database."""

    code = "LF205"


class StorageAccessError(StorageError):
    """The database refused the connection's credentials or user."""

    code = "LF206"
