"""``ledgerflow tokens``: a token is printed once, kept only as a hash, listed inert, revoked.

Real SQLite files through the real command (click's runner); the journal's rows are read with
sqlite3 behind the store's back to prove what is (and is not) stored.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledgerflow.cli.main import cli
from ledgerflow.errors import NotAuthenticatedError, PayloadError, TokenNameTakenError
from ledgerflow.operators.service import AuditQuery, Operations, local_actor, migrate_journal

Entry = Callable[..., tuple[int, str, str]]


def _db(tmp_path: Path) -> tuple[str, Path]:
    path = tmp_path / "tokens.db"
    url = f"sqlite:///{path}"
    migrate_journal(url)
    return url, path


def test_a_token_is_shown_once_and_stored_only_as_its_hash(tmp_path: Path) -> None:
    """Goal: `tokens create` prints a working token once; the journal holds its SHA-256, never
    the secret, and the creation is on the audit log, by who ran the command.

    Method: create a token; its text authenticates as the principal asked for; no column of
    any token row holds the secret; the stored hash is the secret's SHA-256; the audit log
    has a token-create record.
    """
    url, path = _db(tmp_path)
    runner = CliRunner()
    made = runner.invoke(
        cli,
        [
            "tokens",
            "create",
            "--name",
            "alice",
            "--role",
            "operator",
            "--tenant",
            "acme",
            "--db",
            url,
        ],
    )
    assert made.exit_code == 0, made.output
    text = made.stdout.splitlines()[0]
    assert text.startswith("lft_")
    secret = text.split("_", 2)[2]
    with Operations(url) as operations:
        principal = operations.tokens().authenticate(text)
        assert (principal.name, principal.role.value, principal.tenant) == (
            "alice",
            "operator",
            "acme",
        )
        audit = operations.audit(AuditQuery(kind="token-create"))
    assert [(a.actor, a.target) for a in audit] == [(local_actor(), principal.token_id)]
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT * FROM lf_api_tokens").fetchall()
    conn.close()
    assert secret not in repr(rows)
    assert hashlib.sha256(secret.encode()).hexdigest() in repr(rows)


def test_list_is_inert_and_revoke_stops_the_token(tmp_path: Path) -> None:
    """Goal: `tokens list` shows a name with terminal escapes as visible escapes; `tokens
    revoke` stops the token at once; a viewer cannot be scoped to every tenant.

    Method: create a token named with ESC and a bidi override; the list's output holds no raw
    control character and shows them escaped; revoke it: authentication now fails, the list
    (JSON) shows it revoked; `--tenant '*'` for a viewer is refused.
    """
    url, _ = _db(tmp_path)
    runner = CliRunner()
    hostile = "eve\x1b[31m\u202e"
    made = runner.invoke(
        cli,
        [
            "tokens",
            "create",
            "--name",
            hostile,
            "--role",
            "viewer",
            "--tenant",
            "acme",
            "--db",
            url,
            "--json",
        ],
    )
    # A control character in a name is refused by the naming rule, as for every identifier.
    assert isinstance(made.exception, PayloadError)
    made = runner.invoke(
        cli,
        [
            "tokens",
            "create",
            "--name",
            "eve [red]x[/red]",
            "--role",
            "viewer",
            "--tenant",
            "acme",
            "--db",
            url,
            "--json",
        ],
    )
    token = json.loads(made.stdout)
    with Operations(url) as operations:
        operations.tokens().create(
            name="mallory", role="viewer", tenant="acme", created_by="root\x1b[2J"
        )
    listed = runner.invoke(cli, ["tokens", "list", "--db", url])
    assert listed.exit_code == 0, listed.output
    assert "\x1b" not in listed.stdout
    assert "\\x1b[2J" in listed.stdout
    assert "[red]x[/red]" in listed.stdout
    assert token["token"] not in listed.stdout
    revoked = runner.invoke(cli, ["tokens", "revoke", token["token_id"], "--db", url])
    assert revoked.exit_code == 0, revoked.output
    with Operations(url) as operations, pytest.raises(NotAuthenticatedError):
        operations.tokens().authenticate(token["token"])
    items = json.loads(runner.invoke(cli, ["tokens", "list", "--db", url, "--json"]).stdout)
    [row] = [i for i in items["items"] if i["token_id"] == token["token_id"]]
    assert row["revoked_at"] is not None
    wide = runner.invoke(
        cli,
        ["tokens", "create", "--name", "v", "--role", "viewer", "--tenant", "*", "--db", url],
    )
    assert isinstance(wide.exception, PayloadError)


def test_a_name_is_one_live_token_and_reserved_names_are_refused(entry: Entry, db: str) -> None:
    """Goal: `tokens create` refuses a name a live token holds (LF705, naming that token) and
    a name Ledgerflow gives its own principals (LF113), with one line and exit 1; a revoked
    token's name may be given again (a rotation).

    Method: create alice; again: refused, nothing added; revoke alice's token, create alice
    again: made. Each reserved name (any letter case): refused, nothing added.
    """
    migrate_journal(db)
    create = ("tokens", "create", "--role", "operator", "--tenant", "acme", "--db", db)
    code, out, _ = entry(*create, "--name", "alice", "--json")
    assert code == 0
    first = json.loads(out)["token_id"]
    code, _, err = entry(*create, "--name", "alice")
    assert code == 1
    assert err.startswith("error: [LF705]")
    assert first in err
    assert len(err.strip().splitlines()) == 1
    assert entry("tokens", "revoke", first, "--db", db)[0] == 0
    assert entry(*create, "--name", "alice")[0] == 0
    for name in ("ledgerflow:reconciler", "Ledgerflow:anything", "local:root", "LOCAL:alice",
                 "insecure-local", "Insecure-Local"):  # fmt: skip
        code, _, err = entry(*create, "--name", name)
        assert (code, err.split("]")[0]) == (1, "error: [LF113"), (name, err)
    with Operations(db) as operations:
        assert sorted(t.name for t in operations.tokens().list()) == ["alice", "alice"]
        assert [t.revoked_at is None for t in operations.tokens().list()] == [False, True]


def test_two_creations_of_one_name_at_once_make_one_token(db: str) -> None:
    """Goal: the name check and the insert are one step no other creation interleaves with:
    two processes creating one name at the same moment make exactly one token.

    Method: ROUNDS names; per name two threads, each with its own service (its own
    connection), released together by a barrier; exactly one creation per name succeeds and
    the other is TokenNameTakenError; one live token per name in the journal.
    """
    migrate_journal(db)
    rounds = 8
    services = [Operations(db) for _ in range(2)]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def create_all(operations: Operations) -> None:
        for n in range(rounds):
            barrier.wait(timeout=30)
            try:
                operations.tokens().create(
                    name=f"bob-{n}", role="viewer", tenant="acme", created_by="test"
                )
                outcomes.append(f"made bob-{n}")
            except TokenNameTakenError:
                outcomes.append(f"taken bob-{n}")

    threads = [threading.Thread(target=create_all, args=(s,)) for s in services]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for operations in services:
        operations.close()
    assert sorted(outcomes) == sorted(
        [f"made bob-{n}" for n in range(rounds)] + [f"taken bob-{n}" for n in range(rounds)]
    )
    with Operations(db) as operations:
        names = [t.name for t in operations.tokens().list()]
    assert sorted(names) == sorted(f"bob-{n}" for n in range(rounds))
