"""``ledgerflow replay``, ``export`` and ``versions upgrade|migrate`` through the real entry
point, on each backend: verdicts in text and JSON, exit codes, files, audited moves."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from authority_files import granting
from cli.conftest import Entry
from ledgerflow.operators.service import AuditQuery, Operations, local_actor
from replay_shop import ORDER, run_orders, shop


def _code(folder: Path, edition: str) -> str:
    """MODULE:REGISTRY for an edition of the shop's code."""
    path = folder / f"shop_{edition}.py"
    path.write_text(f'from replay_shop import shop\n\nregistry = shop("{edition}").registry\n')
    return f"{path}:registry"


@pytest.fixture
def orders(db: str, journal_url: str) -> dict[str, str]:
    return asyncio.run(
        run_orders(journal_url, shop("v1").registry, done=ORDER, waiting={**ORDER, "wait": True})
    )


def test_replay_reports_and_exits_by_its_verdicts(
    entry: Entry, db: str, orders: dict[str, str], tmp_path: Path
) -> None:
    code, out, _ = entry("replay", _code(tmp_path, "clean"), "--db", db)
    assert code == 0
    assert "2 compatible, 0 divergent" in out
    code, out, _ = entry("replay", _code(tmp_path, "renamed"), "--db", db, "--json")
    assert code == 1
    items = {v["instance_id"]: v for v in json.loads(out)["items"]}
    done = items[orders["done"]]
    assert (done["compatible"], done["kind"], done["position"]) == (False, "mismatch", 3)
    assert "local 'remark'" in done["asks"]
    assert items[orders["waiting"]]["compatible"] is True
    code, out, _ = entry("replay", _code(tmp_path, "renamed"), "--db", db, "--workflow", "none")
    assert (code, out.splitlines()[0]) == (
        0,
        "replayed 0 histories from the journal: 0 compatible, 0 divergent",
    )


def test_exported_histories_replay_without_a_journal(
    entry: Entry, db: str, orders: dict[str, str], tmp_path: Path
) -> None:
    folder = tmp_path / "histories"
    folder.mkdir()
    code, out, _ = entry("export", orders["done"], "--db", db)
    assert code == 0
    (folder / "done.json").write_text(out)
    assert entry("replay", _code(tmp_path, "v1"), "--histories", str(folder))[0] == 0
    code, out, _ = entry("replay", _code(tmp_path, "truncated"), "--histories", str(folder))
    assert code == 1
    assert "the code no longer reaches it" in out
    code, _, err = entry("replay", _code(tmp_path, "v1"))
    assert code == 2
    assert "--histories DIR" in err


def test_versions_upgrade_dry_run_then_move(
    entry: Entry, db: str, orders: dict[str, str], tmp_path: Path
) -> None:
    """Goal: an upgrade needs a role that allows it in the authority file, held by who runs
    the command (the refusal on the record); a dry run moves nothing, a run moves what replays
    clean, a repeat has nothing to do.

    Method: without a role: LF701 naming local:ACCOUNT, one refused record; with --actor: a
    usage error; with the role: dry run, run (moved, audited with the role), repeat.
    """
    fingerprint = shop("patched").registry.get("order", 1).fingerprint
    policy = granting(tmp_path, "upgrade")
    args = ("versions", "upgrade", "order@1", _code(tmp_path, "patched"), "--db", db)
    code, _, err = entry(*args, "--to-fingerprint", fingerprint)
    assert code == 1
    assert err.startswith(f"error: [LF701] {local_actor()} holds no grant that allows upgrade")
    code, _, err = entry(*args, "--to-fingerprint", fingerprint, "--actor", "alice")
    assert code == 2
    assert "--actor is not taken any more" in err
    args = (*args, "--authority", policy)
    code, out, _ = entry(*args, "--to-fingerprint", fingerprint, "--dry-run")
    assert code == 0
    assert "dry run (nothing written)" in out
    assert "1 would move, 0 left pinned" in out
    code, out, _ = entry(*args, "--to-fingerprint", fingerprint, "--json")
    report = json.loads(out)
    assert [o["outcome"] for o in report["outcomes"]] == ["moved"]
    code, out, _ = entry(*args, "--to-fingerprint", fingerprint)
    assert "nothing to upgrade" in out
    with Operations(db) as operations:
        records = operations.audit(AuditQuery(kind="upgrade"))
    assert [(r.outcome, r.actor, r.role) for r in records] == [
        ("refused", local_actor(), None),
        ("applied", local_actor(), "granted"),
    ]
    code, _, err = entry(
        "versions",
        "upgrade",
        "order",
        _code(tmp_path, "v1"),
        "--db",
        db,
        "--to-fingerprint",
        "x",
    )
    assert code == 2
    assert "WORKFLOW@VERSION" in err


def test_versions_migrate_with_a_toml_plan(
    entry: Entry, db: str, orders: dict[str, str], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text('workflow = "order"\n\n[positions]\n1 = 2\n2 = 1\n')
    args = ("versions", "migrate", "order@1", _code(tmp_path, "v2"), "--to", "2", "--plan")
    args = (*args, str(plan), "--db", db, "--authority", granting(tmp_path, "migrate"))
    code, out, _ = entry(*args, "--json")
    assert code == 0
    report = json.loads(out)
    assert [o["outcome"] for o in report["outcomes"]] == ["moved"]
    assert report["outcomes"][0]["audit_id"] is not None
    code, out, _ = entry(*args)
    assert "nothing to migrate" in out
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('workflow = "refund"\n')
    code, _, err = entry(*args[:-5], str(wrong), "--db", db)
    assert code == 2
    assert "the plan says workflow 'refund'" in err


def test_versions_upgrade_takes_the_fingerprint_from_the_code_and_a_dry_run_needs_no_role(
    entry: Entry, db: str, orders: dict[str, str], tmp_path: Path
) -> None:
    """Goal: `versions upgrade W@N MODULE:REGISTRY` moves to the fingerprint the registry's
    code has (no fingerprint copied by hand); --to-fingerprint stays as a check; a dry run
    (only a replay, nothing written) needs no role in the authority file.

    Method: a dry run with no authority file: exit 0, "1 would move", nothing on the record;
    a run with the role and no --to-fingerprint moves the order to the patched code's
    fingerprint; a --to-fingerprint the code does not have is refused.
    """
    fingerprint = shop("patched").registry.get("order", 1).fingerprint
    args = ("versions", "upgrade", "order@1", _code(tmp_path, "patched"), "--db", db)
    code, out, err = entry(*args, "--dry-run")
    assert (code, err) == (0, "")
    assert "1 would move, 0 left pinned" in out
    with Operations(db) as operations:
        assert operations.audit(AuditQuery(kind="upgrade")) == []
    code, _, err = entry(
        *args, "--to-fingerprint", "f" * 32, "--authority", granting(tmp_path, "upgrade")
    )
    assert code == 1
    assert f"has fingerprint {fingerprint}" in err
    code, out, _ = entry(*args, "--authority", granting(tmp_path, "upgrade"), "--json")
    assert code == 0
    [moved] = json.loads(out)["outcomes"]
    assert moved["outcome"] == "moved"
    with Operations(db) as operations:
        assert operations.detail(moved["instance_id"]).instance.fingerprint == fingerprint
