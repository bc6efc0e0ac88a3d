"""The command line with an API token acts through ``ledgerflow serve`` as the token's
principal, with its real authority (issue 22, item 7): ``start``, ``signal``, ``cancel``,
``repair`` and ``versions retire``, each refused below the token's role as any API client
would be, each on the audit log under the token's name. Real processes: the server and every
command are their own processes, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from wait_workflows import registry

from ledgerflow import Engine
from ledgerflow.operators.service import AuditQuery, Operations
from processes import LEDGERFLOW, child_environment

HERE = Path(__file__).parent
TOKENS = {
    # name: (role, tenant)
    "alice": ("signaller", "default"),  # an approver of the "approve" workflow
    "vic": ("viewer", "default"),
    "sam": ("signaller", "default"),
    "olga": ("operator", "default"),
    "root": ("admin", "*"),
}


def _ledgerflow(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LEDGERFLOW, *args],
        env=child_environment(HERE, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_the_command_line_acts_with_a_tokens_authority(processes: Any, journal_url: str) -> None:
    """Goal: given a token and the server's URL, start, signal, cancel, repair and versions
    retire are the token's principal's requests: what its role allows is done, what it does
    not is refused (exit 1, the API's code), each on the record under the token's name, and
    --db is not needed; the token is never printed; an unreachable URL is LF706.

    Method: a serve process over the journal (with the workflows' registry), tokens per
    role. Through the command line with each token: vic's start is LF701; sam's start creates
    the instance (actor sam), in another tenant LF701; an approval with alice's token is
    accepted, with a --sender naming someone else LF701, and sam's is refused as not an
    approver (exit 1, the kept delivery printed); sam's cancel LF701, olga's repair
    cancel (dry run, then applied), olga's force LF701; olga's retire LF701, root's retire
    LF702 (instances in flight); the audit log holds each under its token's name.
    """
    with Operations(journal_url, migrate=None) as operations:
        tokens = {
            name: operations.tokens().create(
                name=name, role=role, tenant=tenant, created_by="test"
            )[0]
            for name, (role, tenant) in TOKENS.items()
        }
    url, server = processes.server("--registry", "wait_workflows:registry", db_url=journal_url)

    def run(who: str, *args: str) -> subprocess.CompletedProcess[str]:
        done = _ledgerflow(*args, "--token", tokens[who], "--url", url)
        assert tokens[who] not in done.stdout + done.stderr
        return done

    def refused(done: subprocess.CompletedProcess[str], code: str) -> None:
        """Exit 1 with the API's code: one line on stderr, or (--json) the error document."""
        assert done.returncode == 1, done.stdout + done.stderr
        if "--json" in done.args:
            assert json.loads(done.stdout)["code"] == code, done.stdout
            return
        assert done.stderr.startswith(f"error: [{code}]"), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1

    start = ("start", "nothing_imported:registry", "approve", "--json")
    refused(run("vic", *start, "--key", "k-vic"), "LF701")
    refused(run("sam", *start, "--key", "k-sam", "--tenant", "globex"), "LF701")
    made = run("sam", *start, "--key", "k-1")
    assert made.returncode == 0, made.stderr
    instance_id = json.loads(made.stdout)["instance_id"]
    assert json.loads(made.stdout)["created"] is True
    # The environment names the token and the server as well as the options do.
    waiter = _ledgerflow(*start, "--key", "k-2", LEDGERFLOW_TOKEN=tokens["sam"], LEDGERFLOW_URL=url)
    assert waiter.returncode == 0, waiter.stderr
    other = json.loads(waiter.stdout)["instance_id"]
    _work(journal_url)
    assert {_status(journal_url, i) for i in (instance_id, other)} == {"WAITING"}

    signal = ("signal", instance_id, "refund", "--json")
    refused(run("alice", *signal, "--event-id", "a-0", "--sender", "bob"), "LF701")
    # sam is a principal the approval does not name: kept, refused, printed as the API kept it.
    not_approver = run("sam", *signal, "--event-id", "s-1", "--payload", '"yes"')
    assert not_approver.returncode == 1, not_approver.stderr
    assert json.loads(not_approver.stdout)["outcome"] == "not-approver"
    approved = run("alice", *signal, "--event-id", "a-1", "--payload", '"yes"')
    assert approved.returncode == 0, approved.stderr
    assert json.loads(approved.stdout)["outcome"] == "accepted"
    _work(journal_url)
    with Operations(journal_url) as operations:
        assert operations.result(instance_id) == {"by": "alice", "decision": "yes"}

    refused(run("sam", "cancel", other, "--reason", "no"), "LF701")
    repair = ("repair", "cancel", other, "--reason", "duplicate order", "--json")
    dry = run("olga", *repair, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["outcome"] == "dry-run"
    applied = run("olga", *repair)
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout)["outcome"] == "applied"
    refused(run("olga", "repair", "force", other, "FAILED", "--reason", "no"), "LF701")

    # No worker has honoured the cancel yet: the other instance is still in flight.
    retire = ("versions", "retire", "approve@1", "--reason", "v2")
    refused(run("olga", *retire), "LF701")
    refused(run("root", *retire), "LF702")

    unreachable = _ledgerflow(
        "cancel", other, "--reason", "x", "--token", tokens["olga"], "--url", "http://127.0.0.1:9"
    )
    refused(unreachable, "LF706")
    assert tokens["olga"] not in unreachable.stderr

    with Operations(journal_url) as operations:
        records = [(r.actor, r.kind, r.outcome) for r in operations.audit(AuditQuery(limit=1000))]
    for expected in [
        ("vic", "start", "refused"),
        ("sam", "start", "refused"),
        ("sam", "start", "applied"),
        ("alice", "signal", "refused"),
        ("sam", "signal", "refused"),
        ("alice", "signal", "applied"),
        ("sam", "cancel", "refused"),
        ("olga", "cancel", "applied"),
        ("olga", "force-terminal", "refused"),
        ("olga", "retire-version", "refused"),
        ("root", "retire-version", "refused"),
    ]:
        assert expected in records, (expected, records)
    assert processes.stop(server) == 0, processes.tail()


def _status(url: str, instance_id: str) -> str:
    with Operations(url) as operations:
        return operations.detail(instance_id).instance.status.value


def _work(url: str) -> None:
    """A worker of this process drives the journal until nothing is due."""

    async def main() -> None:
        async with Engine(url, registry) as engine:
            await engine.worker(lease_seconds=30, poll_seconds=0.01).run(until_nothing_due=True)

    asyncio.run(main())
