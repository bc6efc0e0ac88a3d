"""Which migrations a journal still needs, decided once for both dialects (internal).

A dialect reads what its journal recorded as applied (number -> checksum) and asks
:func:`pending` what is left to apply; the checks that protect a journal are made here, before
anything is written: a journal migrated by a newer Ledgerflow, or whose recorded history no
longer matches the migration files, is refused (:class:`SchemaVersionError`). A store opened
with migration off asks :func:`require_current` instead, which refuses a journal that is not
at this Ledgerflow's schema version and says how to migrate it.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from ledgerflow.errors import SchemaVersionError
from ledgerflow.storage import queries

MIGRATE_HINT = "run `ledgerflow migrate --db URL` (add --dry-run to see the plan first)"


class OnOpen(enum.Enum):
    """What opening a store does to its journal's schema."""

    # Create the journal if missing and apply pending migrations (workers, start, the library).
    MIGRATE = "migrate"
    # Open the journal as it is and refuse one that is missing or not current (read-only
    # commands, and stores whose schema changes go through review).
    REQUIRE = "require"
    # Open the journal as it is, whatever its schema: only to say what would be migrated.
    INSPECT = "inspect"


@dataclass(frozen=True, slots=True)
class Migration:
    number: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def label(self) -> str:
        return f"{self.number:04d}_{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class MigrationStatus:
    """Where a journal stands: its schema version, what this Ledgerflow would apply, and
    whether the journal exists at all (a missing SQLite file would be created)."""

    where: str
    exists: bool
    version: int
    pending: tuple[Migration, ...]


def known(dialect: str) -> list[Migration]:
    return [Migration(n, name, text) for n, name, text in queries.migrations(dialect)]


def pending(applied: Mapping[int, str], dialect: str, *, where: str) -> list[Migration]:
    """The migrations to apply, in order; refuses a newer or altered history."""
    migrations = known(dialect)
    newest = max((m.number for m in migrations), default=0)
    if applied and max(applied) > newest:
        raise SchemaVersionError(
            f"{where} has schema version {max(applied)}, newer than this Ledgerflow knows "
            f"({newest}); upgrade Ledgerflow"
        )
    for migration in migrations:
        recorded = applied.get(migration.number)
        if recorded is not None and recorded != migration.checksum:
            raise SchemaVersionError(
                f"migration {migration.label} of {where} was changed after it was applied"
            )
    return [m for m in migrations if m.number not in applied]


def status_of(applied: Mapping[int, str], dialect: str, *, where: str) -> MigrationStatus:
    """Where an existing journal with these applied migrations stands."""
    return MigrationStatus(
        where=where,
        exists=True,
        version=max(applied, default=0),
        pending=tuple(pending(applied, dialect, where=where)),
    )


def require_current(applied: Mapping[int, str], dialect: str, *, where: str) -> None:
    """Refuse, without writing, a journal that is not at this Ledgerflow's schema version."""
    missing = pending(applied, dialect, where=where)
    if not missing:
        return
    version = max(applied, default=0)
    state = f"is at schema version {version}" if applied else "holds no Ledgerflow schema yet"
    raise SchemaVersionError(
        f"{where} {state}; this Ledgerflow needs version {missing[-1].number}, and this "
        f"command does not migrate: {MIGRATE_HINT}"
    )
