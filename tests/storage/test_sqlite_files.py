"""The SQLite file itself: what is refused before anything is written, and the durable defaults.

A store URL may point at anything: a damaged file, somebody else's database, a journal written by
a newer Ledgerflow or one whose migration history was edited. Each is refused with its own error
and the file is left byte for byte (and, where it is not ours, mtime for mtime) as it was.
Separate ``sqlite3`` connections stand in for the other programs that wrote those files.
"""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path

import pytest

from damaged_files import damage_instances_table
from ledger_records import new
from ledgerflow.errors import (
    ConfigurationError,
    ForeignDatabaseError,
    SchemaVersionError,
    StorageCorruptError,
    StorageUnavailableError,
    StoreNotFoundError,
)
from ledgerflow.storage import migrations, open_store
from ledgerflow.storage.sqlite import APPLICATION_ID, SqliteStore
from ledgerflow.storage.store import Store
from ledgerflow.storage.url import migration_status


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "journal.db"


def _url(path: Path, query: str = "") -> str:
    return f"sqlite:///{path}{query}"


def _open(path: Path, query: str = "") -> SqliteStore:
    store = open_store(_url(path, query))
    assert isinstance(store, SqliteStore)
    return store


def _sql(path: Path, *statements: str) -> list[tuple[object, ...]]:
    """Run statements through a separate connection, as another program would; return the last
    statement's rows."""
    conn = sqlite3.connect(path)
    try:
        rows: list[tuple[object, ...]] = []
        with conn:
            for statement in statements:
                rows = conn.execute(statement).fetchall()
        return rows
    finally:
        conn.close()


def _fingerprint(path: Path) -> tuple[bytes, int, list[str]]:
    """The file's bytes, its mtime, and the folder listing (no journal files appeared)."""
    return path.read_bytes(), os.stat(path).st_mtime_ns, sorted(os.listdir(path.parent))


@pytest.fixture
def closed_journal(path: Path) -> Path:
    """A Ledgerflow journal holding one instance, closed again."""
    store = _open(path)
    store.start_instance(new("k"), now=1.0)
    store.close()
    return path


def test_corrupt_file_is_refused_and_left_untouched(path: Path) -> None:
    """Goal: a file that is not a database is reported as such and never "repaired".

    Method: write 8 KiB of seeded random bytes, open it as a store: StorageCorruptError
    (LF202); the bytes, mtime and folder listing are unchanged.
    """
    path.write_bytes(random.Random(20240601).randbytes(8192))
    before = _fingerprint(path)
    with pytest.raises(StorageCorruptError) as refused:
        open_store(_url(path))
    assert refused.value.code == "LF202"
    assert _fingerprint(path) == before


def test_foreign_database_is_refused_and_left_untouched(path: Path) -> None:
    """Goal: a database that is not Ledgerflow's is never configured or migrated.

    Method: create a ``customers`` table with sqlite3, open it as a store: ForeignDatabaseError
    (LF203) naming the table; bytes, mtime and folder listing are unchanged (no WAL switch, no
    application id, no migration table).
    """
    _sql(path, "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    _sql(path, "INSERT INTO customers (name) VALUES ('ada')")
    before = _fingerprint(path)
    with pytest.raises(ForeignDatabaseError, match="customers") as refused:
        open_store(_url(path))
    assert refused.value.code == "LF203"
    assert _fingerprint(path) == before
    assert _sql(path, "PRAGMA journal_mode") == [("delete",)]


def test_newer_schema_version_is_refused(closed_journal: Path) -> None:
    """Goal: a journal written by a newer Ledgerflow is not used by an older one.

    Method: add migration 999 to lf_schema_migrations by hand; reopening raises
    SchemaVersionError (LF204) naming the version, and the row is still there.
    """
    _sql(
        closed_journal,
        "INSERT INTO lf_schema_migrations VALUES (999, 'future', 'x', 0)",
    )
    with pytest.raises(SchemaVersionError, match="999") as refused:
        open_store(_url(closed_journal))
    assert refused.value.code == "LF204"
    assert _sql(closed_journal, "SELECT max(version) FROM lf_schema_migrations") == [(999,)]


def test_tampered_migration_checksum_is_refused(closed_journal: Path) -> None:
    """Goal: a journal whose recorded migration history was altered is not trusted.

    Method: overwrite migration 1's checksum; reopening raises SchemaVersionError naming it.
    """
    _sql(closed_journal, "UPDATE lf_schema_migrations SET checksum = 'tampered' WHERE version = 1")
    with pytest.raises(SchemaVersionError, match="0001"):
        open_store(_url(closed_journal))


def test_reopening_applies_nothing_and_keeps_data(closed_journal: Path) -> None:
    """Goal: opening an up-to-date journal is read-only as far as the schema goes.

    Method: record lf_schema_migrations (including applied_at), reopen twice; the rows are
    identical, the schema version is unchanged and the instance is still there.
    """
    applied = _sql(closed_journal, "SELECT * FROM lf_schema_migrations ORDER BY version")
    assert [row[0] for row in applied] == list(range(1, len(applied) + 1))
    for _ in range(2):
        store = _open(closed_journal)
        try:
            assert store.schema_version() == len(applied)
            record = store.get_instance(new("k").instance_id)
            assert record is not None
            assert record.business_key == "k"
        finally:
            store.close()
    assert _sql(closed_journal, "SELECT * FROM lf_schema_migrations ORDER BY version") == applied


def test_durable_defaults(path: Path) -> None:
    """Goal: by default every acknowledged commit survives power loss.

    Method: open a new store; a separate connection sees journal_mode WAL and Ledgerflow's
    application id; the store's own connection (synchronous is per connection, hence the private
    ``_conn``) runs synchronous=FULL (2).
    """
    store = _open(path)
    try:
        assert store.synchronous == "full"
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2
        assert _sql(path, "PRAGMA journal_mode") == [("wal",)]
        assert _sql(path, "PRAGMA application_id") == [(APPLICATION_ID,)]
    finally:
        store.close()


def test_synchronous_normal_is_accepted(path: Path) -> None:
    """Goal: the explicit, less durable setting is available when asked for by name.

    Method: open with ``?synchronous=normal``; the connection runs synchronous=NORMAL (1).
    """
    store = _open(path, "?synchronous=normal")
    try:
        assert store.synchronous == "normal"
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    finally:
        store.close()


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///{path}?synchronous=bogus",
        "sqlite:///{path}?journal=memory",
        "mysql://localhost/ledger",
        "redis:///{path}",
        "sqlite://",
    ],
    ids=["bogus-synchronous", "unknown-option", "mysql", "redis", "no-file"],
)
def test_bad_urls_are_configuration_errors(path: Path, url: str) -> None:
    """Goal: a mistyped store URL fails fast with a configuration error, creating nothing.

    Method: open each bad URL; expect ConfigurationError (LF100) and no database file.
    """
    with pytest.raises(ConfigurationError) as refused:
        open_store(url.format(path=path))
    assert refused.value.code == "LF100"
    assert not path.exists()


def test_missing_folder_is_reported_as_unavailable(tmp_path: Path) -> None:
    """Goal: a store in a folder that does not exist is not silently created elsewhere.

    Method: open a store under a missing folder: StorageUnavailableError, nothing created.
    """
    missing = tmp_path / "nope" / "journal.db"
    with pytest.raises(StorageUnavailableError):
        open_store(_url(missing))
    assert not missing.parent.exists()


def test_plain_path_opens_a_sqlite_store(path: Path) -> None:
    """Goal: a bare file path is a SQLite store (the zero set-up case).

    Method: open by path, write an instance, reopen by URL and read it.
    """
    store: Store = open_store(str(path))
    store.start_instance(new("k"), now=1.0)
    store.close()
    again = _open(path)
    try:
        assert again.get_instance(new("k").instance_id) is not None
    finally:
        again.close()


# -- opening without creating, without migrating; empty and damaged files (issue 15) -----------


def test_a_zero_byte_file_is_refused_not_set_up_as_a_new_journal(path: Path) -> None:
    """Goal: a truncated journal (0 bytes) never quietly becomes a fresh ledger, which would
    restart every business key.

    Method: create an empty file and open it as a store: StorageCorruptError (LF202) saying it
    is empty; the file is still empty and nothing else appeared in the folder.
    """
    path.touch()
    before = sorted(os.listdir(path.parent))
    with pytest.raises(StorageCorruptError, match="empty file") as refused:
        open_store(_url(path))
    assert refused.value.code == "LF202"
    assert path.stat().st_size == 0
    assert sorted(os.listdir(path.parent)) == before


def test_a_new_journal_is_created_whole_by_concurrent_openers(tmp_path: Path) -> None:
    """Goal: processes opening a journal that does not exist yet never see it half made (an
    empty file would be refused as truncated).

    Method: eight threads open the same new path at once (a barrier releases them together);
    every one gets a usable store, and no scratch file is left in the folder.
    """
    import threading

    path = tmp_path / "new.db"
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def open_it() -> None:
        barrier.wait()
        try:
            store = open_store(_url(path))
            store.close()
        except Exception as exc:  # noqa: BLE001 - collected, then asserted to be none
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert [name for name in os.listdir(tmp_path) if name.endswith(".new")] == []
    again = _open(path)
    try:
        assert again.schema_version() == len(migrations.known("sqlite"))
    finally:
        again.close()


def test_opening_without_migrating_creates_nothing(path: Path) -> None:
    """Goal: a store opened with migration off never creates a journal (a typo in a read-only
    command must not leave an empty ledger behind).

    Method: open a missing file with migrate=False and with ?migrate=false: StoreNotFoundError
    (LF205) naming the path; no file exists afterwards.
    """
    for opener in (
        lambda: open_store(_url(path), migrate=False),
        lambda: open_store(_url(path, "?migrate=false")),
    ):
        with pytest.raises(StoreNotFoundError) as refused:
            opener()
        assert refused.value.code == "LF205"
        assert str(path) in str(refused.value)
        assert not path.exists()


def test_an_older_journal_is_refused_when_migration_is_off(closed_journal: Path) -> None:
    """Goal: with migration off, a journal that needs migrating is refused with the way out,
    and left as it was; the default still migrates it.

    Method: forget the newest migration's record (as if an older Ledgerflow wrote the journal)
    and drop what it made; open with ?migrate=false: SchemaVersionError naming `ledgerflow
    migrate`, the file's bytes unchanged; open by default: migrated to the newest version.
    """
    newest = migrations.known("sqlite")[-1]
    _sql(closed_journal, f"DELETE FROM lf_schema_migrations WHERE version = {newest.number}")
    before = closed_journal.read_bytes()
    with pytest.raises(SchemaVersionError, match="ledgerflow migrate") as refused:
        open_store(_url(closed_journal, "?migrate=false"))
    assert f"needs version {newest.number}" in str(refused.value)
    assert closed_journal.read_bytes() == before
    status = migration_status(_url(closed_journal))
    assert [m.number for m in status.pending] == [newest.number]
    assert closed_journal.read_bytes() == before


def test_a_current_journal_opens_for_reading_with_migration_off(closed_journal: Path) -> None:
    """Goal: read-only opening works on a current journal and writes nothing to the file.

    Method: open with migrate=False, read the instance, close; the main file's bytes are the
    same as before.
    """
    before = closed_journal.read_bytes()
    store = open_store(_url(closed_journal), migrate=False)
    try:
        assert store.get_instance(new("k").instance_id) is not None
    finally:
        store.close()
    assert closed_journal.read_bytes() == before


def test_memory_is_not_a_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Goal: `:memory:` is refused: a journal must outlive the process and be shared.

    Method: open `:memory:` and `sqlite:///:memory:`: ConfigurationError, no file named
    `:memory:` appears in the working folder.
    """
    monkeypatch.chdir(tmp_path)
    for url in (":memory:", "sqlite:///:memory:"):
        with pytest.raises(ConfigurationError, match="outlive"):
            open_store(url)
    assert os.listdir(tmp_path) == []


def test_a_damaged_page_is_a_clear_lf202_on_every_read(path: Path) -> None:
    """Goal: reading a journal with a damaged page raises the storage error (LF202), not the
    driver's error from the read's cleanup (the bug: LF202 was replaced by a raw
    sqlite3.DatabaseError from the COMMIT that ends the read).

    Method: a journal with instances, its instances table's root page overwritten; list,
    detail and get through SyncEngine all raise StorageCorruptError naming the file.
    """
    from ledgerflow import Registry, SyncEngine

    store = _open(path)
    for index in range(50):
        store.start_instance(new(f"k{index}"), now=1.0)
    store.close()
    damage_instances_table(path)
    with SyncEngine(_url(path), Registry()) as engine:
        for read in (
            lambda: engine.list(),
            lambda: engine.detail(new("k1").instance_id),
            lambda: engine.get(new("k1").instance_id),
        ):
            with pytest.raises(StorageCorruptError, match="malformed") as refused:
                read()
            assert refused.value.code == "LF202"
