"""``ledgerflow locks`` (table and ``--json``) on a SQLite journal holding locks in two
tenants (the lock world)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from ledgerflow.cli.main import cli
from ledgerflow.storage import open_store
from lock_world import build


def test_locks_lists_holders_waiters_and_parked_holders(tmp_path: Path) -> None:
    """Goal: the table names each lock's holder, marks the parked one, and lists the waiter;
    ``--json`` has the same, ``--tenant`` keeps one tenant's; with no lock held it says so.

    Method: an empty journal first, then the lock world's; run the command through click.
    """
    runner = CliRunner()
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    open_store(empty).close()
    nothing = runner.invoke(cli, ["locks", "--db", empty])
    assert nothing.exit_code == 0, nothing.output
    assert "no lock is held" in nothing.output
    db = f"sqlite:///{tmp_path / 'locks.db'}"
    world = build(db)
    table = runner.invoke(cli, ["locks", "--db", db], env={"COLUMNS": "240"})
    assert table.exit_code == 0, table.output
    assert "account:1" in table.output
    assert "account:2" in table.output
    assert "parked: keeps the lock" in table.output
    assert world.waiter in table.output
    listed = runner.invoke(cli, ["locks", "--db", db, "--json", "--tenant", "acme"])
    assert listed.exit_code == 0, listed.output
    items = json.loads(listed.output)["items"]
    assert [i["holder"]["instance_id"] for i in items] == [world.holder, world.parked]
    assert [i["holder"]["parked"] for i in items] == [False, True]
