"""The kit's ASGI adapter over real HTTP, driven by the engine's own remote adapter.

``kit_shop.py`` runs as a real uvicorn process on a SQLite file or a PostgreSQL schema; the
engine reaches it with :func:`~ledgerflow.participant.remote_participant`, as it would any
service. A lost response is real: the shop commits, swallows the answer and holds the
connection until the engine's client times out.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from kit_databases import Database, make_database

import ledgerflow as lf
from ledgerflow.errors import EffectRejectedError
from ledgerflow.model.definition import EffectCall
from ledgerflow.model.ids import EffectId, IdempotencyKey, InstanceId
from ledgerflow.participant import LookupAnswer, remote_participant
from processes import WAIT_SECONDS_MAX, first_line

SHOP = Path(__file__).with_name("kit_shop.py")
# The engine's wait for an answer: the lost response is this long.
TIMEOUT_SECONDS = 1.0
FAST = lf.RetryPolicy(attempts_max=3, backoff_initial=timedelta(milliseconds=5))

pytestmark = pytest.mark.slow


class Shop:
    def __init__(self, url: str, database: Database) -> None:
        self.url = url
        self.database = database

    def lose_next_response(self) -> None:
        httpx.post(f"{self.url}/_control/lose", timeout=WAIT_SECONDS_MAX).raise_for_status()

    def seen(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = httpx.get(
            f"{self.url}/_control/seen", timeout=WAIT_SECONDS_MAX
        ).json()
        return answer

    def charges(self, key: str) -> list[tuple[Any, ...]]:
        return self.database.rows("SELECT id, amount FROM charges WHERE key = ?", key)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shop]:
    database = make_database(request.param, request.node.nodeid, tmp_path)
    process = subprocess.Popen(
        [sys.executable, str(SHOP), database.url], stdout=subprocess.PIPE, text=True
    )
    try:
        line = first_line(process)
        assert line.startswith("LISTENING "), line
        yield Shop(line.split()[1], database)
    finally:
        process.kill()
        process.wait(timeout=WAIT_SECONDS_MAX)
        assert process.stdout is not None
        process.stdout.close()


def _charges(shop: Shop, *, deduplicates: bool, has_lookup: bool) -> Any:
    return remote_participant(
        "charges",
        shop.url,
        operations={"charge": "compensatable"},
        compensations={"charge": "refund"},
        deduplicates=deduplicates,
        has_lookup=has_lookup,
        timeout_seconds=TIMEOUT_SECONDS,
        retry=FAST,
    )


def _registry(participant: Any) -> lf.Registry:
    registry = lf.Registry()
    registry.add_participant(participant)

    @registry.workflow(name="pay", version=1)
    async def pay(ctx: lf.WorkflowContext, amount: int) -> Any:
        return await ctx.effect(participant.effects["charge"], {"amount": amount})

    return registry


def _pay(journal: str, registry: lf.Registry) -> tuple[lf.InstanceRecord, lf.EffectRecord]:
    """Run one payment of 7 to its end: the instance and its one effect."""

    async def pay() -> tuple[lf.InstanceRecord, lf.EffectRecord]:
        async with lf.Engine(journal, registry) as engine:
            started = await engine.start("pay", key="order-1", input=7)
            await engine.worker(poll_seconds=0.01).run(until_idle=True)
            [effect] = (await engine.detail(started.instance_id)).effects
            return await engine.get(started.instance_id), effect

    return asyncio.run(pay())


def _pay_with_the_first_response_lost(
    shop: Shop, tmp_path: Path, *, deduplicates: bool
) -> lf.EffectRecord:
    """Pay 7 through a participant that deduplicates (or else has a lookup), the first
    response lost: the instance succeeds, with the one charge row's receipt as evidence."""
    shop.lose_next_response()
    journal = f"sqlite:///{tmp_path}/journal.db"
    participant = _charges(shop, deduplicates=deduplicates, has_lookup=not deduplicates)
    record, effect = _pay(journal, _registry(participant))
    assert record.status is lf.InstanceStatus.SUCCEEDED, record.reason
    [(charge_id, amount)] = shop.charges(effect.idempotency_key)
    assert json.loads(effect.evidence or "null") == {"charge": charge_id, "amount": 7}
    assert amount == 7
    return effect


def test_a_lost_response_resent_to_the_kit_applies_once(shop: Shop, tmp_path: Path) -> None:
    """Goal: the engine re-sending an effect whose response was lost never applies it twice,
    and gets the first application's receipt.

    Method: the shop loses the answer to the first apply (committed there); the engine's
    client times out, the effect is UNKNOWN, and since the participant deduplicates (no
    lookup) the engine re-sends the same key: the shop answers the first receipt as a
    duplicate. One charge row at the shop; the instance succeeded with that receipt; both
    requests carried the key as an Idempotency-Key header."""
    effect = _pay_with_the_first_response_lost(shop, tmp_path, deduplicates=True)
    assert effect.attempt == 2
    header = f'"{effect.idempotency_key}"'
    assert shop.seen() == [{"idempotency_key": header}] * 2


def test_a_lost_response_is_settled_by_the_lookup_without_a_resend(
    shop: Shop, tmp_path: Path
) -> None:
    """Goal: with a lookup, the engine settles a lost response from the kit's record.

    Method: as above, but the participant is declared with a lookup and without dedupe: the
    engine asks the lookup after the timeout, which answers applied with the receipt: one
    apply request in all, one charge row, the instance succeeded with that receipt."""
    _pay_with_the_first_response_lost(shop, tmp_path, deduplicates=False)
    assert len(shop.seen()) == 1


def _call(key: str, attempt: int, **extra: Any) -> EffectCall:
    return EffectCall(
        participant="charges",
        operation=extra.pop("operation", "charge"),
        idempotency_key=IdempotencyKey(key),
        effect_id=EffectId(f"{key}/effect"),
        instance_id=InstanceId("instance-1"),
        attempt=attempt,
        payload={"amount": 3},
        **extra,
    )


def _run(participant: Any, operation: str, call: EffectCall) -> Any:
    return asyncio.run(participant.effects[operation].function(call))


def test_a_not_applied_lookup_fences_the_late_original(shop: Shop) -> None:
    """Goal: over HTTP, the kit's "not applied" keeps its promise against a late original.

    Method: through the engine's adapter, look up a key at attempt 1 (not applied); the
    original, attempt 1, arriving afterwards is refused for good (``fenced``); attempt 2
    applies; the lookup then answers applied with its receipt; one charge row."""
    charges = _charges(shop, deduplicates=True, has_lookup=True)
    key = "lf:default:charges/charge:late 1/r1/s1/effect?x=%2F"
    assert (
        asyncio.run(charges.lookup_function(IdempotencyKey(key), 1)) == LookupAnswer.not_applied()
    )
    with pytest.raises(EffectRejectedError) as caught:
        _run(charges, "charge", _call(key, 1))
    assert (caught.value.error_code, caught.value.retryable) == ("fenced", False)
    receipt = _run(charges, "charge", _call(key, 2))
    assert asyncio.run(charges.lookup_function(IdempotencyKey(key), 2)) == LookupAnswer.applied(
        receipt
    )
    assert len(shop.charges(key)) == 1


def test_a_compensation_never_shares_its_original_s_record(shop: Shop) -> None:
    """Goal: a compensation under its own key is applied apart from the original; one sent
    under the original's key is refused, never answered with the original's receipt.

    Method: apply an original, then its compensation under ``compensate:`` + the key (its own
    receipt, its own row), then a compensation whose key is the original's own (rejected)."""
    charges = _charges(shop, deduplicates=True, has_lookup=True)
    original = _run(charges, "charge", _call("c-1", 1))
    refund = _run(
        charges,
        "refund",
        _call("compensate:c-1", 1, operation="refund", original_key=IdempotencyKey("c-1")),
    )
    assert refund != original
    assert [amount for _, amount in shop.charges("compensate:c-1")] == [-3]
    with pytest.raises(EffectRejectedError) as caught:
        _run(
            charges,
            "refund",
            _call("c-1", 1, operation="refund", original_key=IdempotencyKey("c-1")),
        )
    assert caught.value.error_code == "compensation_key_is_original"


def test_the_idempotency_key_header_must_name_the_body_s_key(shop: Shop) -> None:
    """Goal: a request whose Idempotency-Key header and body disagree is refused whole.

    Method: post an apply with another key in the header: 400, a problem document naming
    both keys, nothing applied; the same body with the matching header (quoted, or bare)
    applies."""
    body = {"key": "h-1", "operation": "charge", "payload": {"amount": 1}, "attempt": 1}
    response = httpx.post(
        f"{shop.url}/charges/apply", json=body, headers={"Idempotency-Key": '"h-2"'}
    )
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["title"] == "Idempotency-Key header and body key differ"
    assert "'h-2'" in problem["detail"]
    assert "'h-1'" in problem["detail"]
    assert shop.charges("h-1") == []
    for header in ('"h-1"', "h-1"):
        ok = httpx.post(f"{shop.url}/charges/apply", json=body, headers={"Idempotency-Key": header})
        assert ok.status_code == 200, ok.text
    assert len(shop.charges("h-1")) == 1


def test_the_kit_declares_its_key_retention(shop: Shop) -> None:
    """Goal: a checker can read the window a participant keeps its keys for.

    Method: GET /charges/_kit: the kit's declaration, with the shop's 7-day window."""
    declared = httpx.get(f"{shop.url}/charges/_kit").json()
    assert declared["participant"] == "charges"
    assert declared["key_retention_seconds"] == timedelta(days=7).total_seconds()
    assert declared["deduplicates"] is declared["lookup_fences"] is True
