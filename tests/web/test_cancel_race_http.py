"""Two cancels of one instance at once over real HTTP (``ledgerflow serve`` in its own process):
one answer is the applied request, the other a no-op naming the first one's reason, and the
audit log says so (issue 22, item B). On SQLite and PostgreSQL.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from wait_workflows import registry

from ledgerflow.operators.service import AuditQuery, Operations

PAIRS = 10
TIMEOUT = 30.0


def _tokens(url: str) -> dict[str, str]:
    with Operations(url, migrate=None) as operations:
        return {
            name: operations.tokens().create(
                name=name, role="operator", tenant="default", created_by="test"
            )[0]
            for name in ("olga", "otto")
        }


@pytest.mark.slow
def test_two_cancels_racing_over_http(processes: Any, journal_url: str) -> None:
    """Goal: two operators cancelling one instance at the same moment through the API get
    one applied request and one no-op, on the record with each principal; both answers name
    the reason the instance kept.

    Method: PAIRS waiting instances; a serve process; per instance two threads POST
    ``/cancel`` together (released by a barrier), each with its own token and reason; per
    instance exactly one ``applied`` and one ``no-op`` record (by olga and otto, one each),
    and both 200 answers carry the applied request's reason.
    """
    with Operations(journal_url, registry=registry, migrate=None) as operations:
        ids = [
            operations.start("forever", key=f"race-{n}", actor="test").instance_id
            for n in range(PAIRS)
        ]
    tokens = _tokens(journal_url)
    url, server = processes.server(db_url=journal_url)
    barrier = threading.Barrier(2)
    answers: dict[tuple[str, str], httpx.Response] = {}
    failures: list[BaseException] = []

    def cancel_all(name: str) -> None:
        headers = {"Authorization": f"Bearer {tokens[name]}"}
        try:
            with httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT) as client:
                for instance_id in ids:
                    barrier.wait(timeout=TIMEOUT)
                    answers[name, instance_id] = client.post(
                        f"/v1/instances/{instance_id}/cancel", json={"reason": f"by {name}"}
                    )
        except Exception as exc:  # noqa: BLE001 - collected, then asserted to be none
            failures.append(exc)

    threads = [threading.Thread(target=cancel_all, args=(name,)) for name in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    with Operations(journal_url) as operations:
        for instance_id in ids:
            records = operations.audit(AuditQuery(instance_id=instance_id, kind="cancel"))
            outcomes = sorted((r.outcome, r.actor) for r in records)
            assert [o for o, _ in outcomes] == ["applied", "no-op"], outcomes
            assert {a for _, a in outcomes} == {"olga", "otto"}
            first = next(r.reason for r in records if r.outcome == "applied")
            assert operations.detail(instance_id).instance.cancel_reason == first
            for name in tokens:
                answer = answers[name, instance_id]
                assert answer.status_code == 200, answer.text
                assert answer.json()["cancel_reason"] == first
    assert processes.stop(server) == 0, processes.tail()
