"""The fake participant service and the remote-participant adapter, over real HTTP.

One service runs as a real subprocess for the whole module (started exactly as an operator or a
crash test would start it); each test uses its own keys and resets the fault rules, so tests do
not depend on each other. Faults are injected through the service's control endpoints and
waited for with bounded long-polls, never with sleeps.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import inspect
import queue
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledgerflow.demo.service import ParticipantSpec, start_in_thread
from ledgerflow.errors import EffectRejectedError
from ledgerflow.model.definition import EffectCall
from ledgerflow.model.effect import LookupAnswer, LookupVerdict
from ledgerflow.model.ids import EffectId, IdempotencyKey, InstanceId
from ledgerflow.participant import Precondition, PreconditionVerdict
from ledgerflow.participant.remote import (
    RemoteOutcomeUnknown,
    RemoteParticipant,
    RemotePreconditionError,
    remote_participant,
)

STARTUP_SECONDS = 10.0
REQUEST_SECONDS = 5.0


@dataclass
class Service:
    url: str
    http: httpx.Client

    def apply(self, participant: str, key: str, attempt: int = 1) -> httpx.Response:
        return self.http.post(
            f"/{participant}/apply",
            json={"key": key, "operation": "op", "payload": {"n": 1}, "attempt": attempt},
        )

    def lookup(self, participant: str, key: str, attempt: int = 1) -> dict[str, Any]:
        answer = _remote(self, participant, lookup=True).lookup_function
        assert answer is not None
        result = _run(answer(IdempotencyKey(key), attempt))
        assert isinstance(result, LookupAnswer)
        return {"verdict": result.verdict, "evidence": result.evidence}

    def ledger(self, participant: str, key: str) -> dict[str, list[dict[str, Any]]]:
        response = self.http.get(f"/{participant}/ledger")
        response.raise_for_status()
        tables: dict[str, list[dict[str, Any]]] = response.json()
        return {name: [row for row in rows if row["key"] == key] for name, rows in tables.items()}

    def rules(self, *rules: dict[str, Any]) -> None:
        self.http.post("/_control/rules", json=list(rules)).raise_for_status()

    def wait_held(self, count: int) -> int:
        response = self.http.get("/_control/held", params={"at_least": count, "timeout": 5})
        held: int = response.json()["held"]
        return held

    def release(self, then: str) -> int:
        response = self.http.post("/_control/release", json={"then": then})
        response.raise_for_status()
        released: int = response.json()["released"]
        return released


def _read_first_line(process: subprocess.Popen[bytes], timeout: float) -> str:
    # readline() blocks; a helper thread turns it into a bounded wait.
    lines: queue.Queue[bytes] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout).decode().strip()
    except queue.Empty:
        return ""


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    directory: Path = tmp_path_factory.mktemp("participants")
    stderr_path = directory / "service.stderr"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ledgerflow.demo.service",
                "--dir",
                str(directory),
                "--port",
                "0",
                "--participant",
                "inventory:lookup",
                "--participant",
                "payment:dedupe",
                "--participant",
                "email:dedupe+lookup",
                "--participant",
                "legacy:none",
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        try:
            line = _read_first_line(process, STARTUP_SECONDS)
            if not line.startswith("LISTENING http://127.0.0.1:"):
                process.kill()
                process.wait(timeout=REQUEST_SECONDS)
                pytest.fail(f"service did not start: {line!r}\n{stderr_path.read_text()}")
            url = line.split(" ", 1)[1]
            assert (directory / "service.url").read_text().strip() == url
            with httpx.Client(base_url=url, timeout=REQUEST_SECONDS) as http:
                yield Service(url=url, http=http)
        finally:
            process.terminate()
            try:
                process.wait(timeout=REQUEST_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=REQUEST_SECONDS)
            assert process.stdout is not None
            process.stdout.close()


@pytest.fixture
def service(running: Service) -> Iterator[Service]:
    running.rules()
    yield running
    running.rules()
    running.release("drop")


def _remote(
    service: Service,
    participant: str,
    *,
    lookup: bool = False,
    deduplicates: bool = False,
    timeout_seconds: float = REQUEST_SECONDS,
) -> RemoteParticipant:
    return remote_participant(
        participant,
        service.url,
        operations={"op": "compensatable"},
        deduplicates=deduplicates,
        has_lookup=lookup,
        timeout_seconds=timeout_seconds,
    )


def _run(result: Any) -> Any:
    if inspect.isawaitable(result):

        async def wait() -> Any:
            return await result

        return asyncio.run(wait())
    return result


def _dispatch(participant: RemoteParticipant, key: str, attempt: int = 1) -> Any:
    call = EffectCall(
        participant=participant.name,
        operation="op",
        idempotency_key=IdempotencyKey(key),
        effect_id=EffectId(f"{key}/effect"),
        instance_id=InstanceId("instance-1"),
        attempt=attempt,
        payload={"amount": 5},
    )
    return _run(participant.effects["op"].function(call))


def _apply_in_background(
    service: Service, participant: str, key: str
) -> concurrent.futures.Future[httpx.Response]:
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    future = executor.submit(
        httpx.post,
        f"{service.url}/{participant}/apply",
        json={"key": key, "operation": "op", "payload": None, "attempt": 1},
        timeout=REQUEST_SECONDS,
    )
    executor.shutdown(wait=False)
    return future


def test_non_deduplicating_participant_applies_a_repeated_key_twice(service: Service) -> None:
    """Goal: a participant without deduplication records a repeated key as a second effect.

    Method: apply the same key twice to `legacy` and read its own ledger: two applied rows.
    """
    first = service.apply("legacy", "twice-1")
    second = service.apply("legacy", "twice-1")
    assert first.status_code == second.status_code == 200
    assert first.json()["receipt"]["applied_seq"] != second.json()["receipt"]["applied_seq"]
    ledger = service.ledger("legacy", "twice-1")
    assert len(ledger["applied"]) == 2
    assert len(ledger["received"]) == 2


def test_deduplicating_participant_applies_once_and_answers_duplicate(service: Service) -> None:
    """Goal: a deduplicating participant applies a key once and says so on the second arrival.

    Method: apply one key twice to `payment`; the second answer carries the first receipt and
    `duplicate: true`; its ledger holds one applied row and two received rows.
    """
    first = service.apply("payment", "once-1")
    second = service.apply("payment", "once-1")
    assert first.status_code == second.status_code == 200
    assert second.json()["duplicate"] is True
    assert second.json()["receipt"] == first.json()["receipt"]
    ledger = service.ledger("payment", "once-1")
    assert len(ledger["applied"]) == 1
    assert len(ledger["received"]) == 2


def test_lookup_not_applied_fences_the_attempts_asked_about(service: Service) -> None:
    """Goal: a not-applied answer at attempt N is a promise that attempts 1..N never apply.

    Method: look up an unseen key at `inventory` for attempt 2 (not-applied); attempts 1 and 2
    of that key are then refused 409 `fenced`, not retryable, and not applied though received;
    a lower lookup afterwards does not narrow the fence; attempt 3 (the engine's re-dispatch)
    applies once.
    """
    assert service.lookup("inventory", "fence-1", 2)["verdict"] is LookupVerdict.NOT_APPLIED
    for attempt in (1, 2):
        response = service.apply("inventory", "fence-1", attempt)
        assert response.status_code == 409
        assert response.json() == {
            "status": "rejected",
            "error_code": "fenced",
            "retryable": False,
        }
    assert service.lookup("inventory", "fence-1", 1)["verdict"] is LookupVerdict.NOT_APPLIED
    assert service.apply("inventory", "fence-1", 2).status_code == 409
    assert service.apply("inventory", "fence-1", 3).status_code == 200
    ledger = service.ledger("inventory", "fence-1")
    assert [row["attempt"] for row in ledger["applied"]] == [3]
    assert len(ledger["received"]) == 4
    assert [row["up_to_attempt"] for row in ledger["fenced"]] == [2]


def test_lookup_reports_applied_with_the_first_receipt(service: Service) -> None:
    """Goal: after an apply, the lookup answers applied with that application's receipt.

    Method: apply a key full of URL-special characters to `inventory`, then look it up through
    the remote adapter: applied, evidence equal to the receipt, and the key not fenced.
    """
    key = "lf:default:inventory.op:inst 1/r1/s2/effect?x=%2F#frag"
    receipt = service.apply("inventory", key).json()["receipt"]
    answer = service.lookup("inventory", key)
    assert answer == {"verdict": LookupVerdict.APPLIED, "evidence": receipt}
    assert receipt["key"] == key
    assert service.ledger("inventory", key)["fenced"] == []


def test_held_then_dropped_request_is_received_but_not_applied(service: Service) -> None:
    """Goal: a request lost after arrival leaves a received row and no effect.

    Method: hold `legacy` requests, send one from a background thread, wait (bounded) until it
    is held, check the ledger, release with `drop`: the caller gets 503, nothing is applied.
    """
    service.rules({"participant": "legacy", "key_contains": "drop-1", "action": "hold"})
    pending = _apply_in_background(service, "legacy", "drop-1")
    assert service.wait_held(1) == 1
    ledger = service.ledger("legacy", "drop-1")
    assert (len(ledger["received"]), len(ledger["applied"])) == (1, 0)
    assert service.release("drop") == 1
    assert pending.result(timeout=REQUEST_SECONDS).status_code == 503
    ledger = service.ledger("legacy", "drop-1")
    assert (len(ledger["received"]), len(ledger["applied"])) == (1, 0)


def test_delayed_original_arriving_after_the_fence_is_refused(service: Service) -> None:
    """Goal: the fencing promise holds for a request that was already in flight.

    Method: hold attempt 1 of an `inventory` apply after it was received, answer a lookup for
    its key at attempt 1 (not-applied), re-dispatch as attempt 2 (applied), then let the held
    original continue: refused 409 `fenced`; the ledger holds exactly one application.
    """
    service.rules({"participant": "inventory", "operation": "op", "action": "hold"})
    pending = _apply_in_background(service, "inventory", "late-1")
    assert service.wait_held(1) == 1
    assert service.lookup("inventory", "late-1", 1)["verdict"] is LookupVerdict.NOT_APPLIED
    assert service.apply("inventory", "late-1", 2).status_code == 200
    assert service.release("apply") == 1
    response = pending.result(timeout=REQUEST_SECONDS)
    assert response.status_code == 409
    assert response.json()["error_code"] == "fenced"
    assert [row["attempt"] for row in service.ledger("inventory", "late-1")["applied"]] == [2]


def test_rules_fire_the_stated_number_of_times(service: Service) -> None:
    """Goal: a rule is spent after `times` firings and only matches what it names.

    Method: a two-shot reject rule for one key of `legacy`: another key applies, the named key
    is rejected twice, then applies.
    """
    service.rules(
        {"participant": "legacy", "key_contains": "spent-1", "action": "reject", "times": 2}
    )
    assert service.apply("legacy", "other-1").status_code == 200
    assert [service.apply("legacy", "spent-1").status_code for _ in range(3)] == [409, 409, 200]
    assert len(service.ledger("legacy", "spent-1")["applied"]) == 1


def test_remote_effect_returns_the_receipt_as_evidence(service: Service) -> None:
    """Goal: a successful dispatch through the adapter returns the participant's receipt.

    Method: call the declared effect function of a remote `payment` with a hand-built EffectCall
    and compare with the participant's ledger.
    """
    payment = _remote(service, "payment", deduplicates=True)
    receipt = _dispatch(payment, "remote-ok-1")
    row = service.ledger("payment", "remote-ok-1")["applied"]
    assert receipt == {
        "participant": "payment",
        "operation": "op",
        "key": "remote-ok-1",
        "effect_id": "remote-ok-1/effect",
        "applied_seq": row[0]["seq"],
    }
    assert row[0]["payload"] == {"amount": 5}


def test_reject_rule_raises_effect_rejected(service: Service) -> None:
    """Goal: a participant's explicit rejection reaches the engine as proof of not applied.

    Method: a reject rule on `payment`; the remote effect function raises EffectRejectedError
    with the participant's error code and retryability; the ledger has no applied row.
    """
    service.rules({"participant": "payment", "action": "reject"})
    with pytest.raises(EffectRejectedError) as caught:
        _dispatch(_remote(service, "payment", deduplicates=True), "remote-reject-1")
    assert caught.value.error_code == "temporarily_unavailable"
    assert caught.value.retryable is True
    assert service.ledger("payment", "remote-reject-1")["applied"] == []


def test_fenced_attempt_raises_a_final_rejection(service: Service) -> None:
    """Goal: after the adapter's lookup fenced attempt 1, dispatching it is a final rejection.

    Method: lookup through a remote `email` at attempt 1 (not-applied), then dispatch attempt 1:
    rejected with error code `fenced` and `retryable=False`; attempt 2 returns a receipt.
    """
    email = _remote(service, "email", deduplicates=True, lookup=True)
    assert email.lookup_function is not None
    answer = _run(email.lookup_function(IdempotencyKey("remote-fence-1"), 1))
    assert answer == LookupAnswer.not_applied()
    with pytest.raises(EffectRejectedError) as caught:
        _dispatch(email, "remote-fence-1", attempt=1)
    assert (caught.value.error_code, caught.value.retryable) == ("fenced", False)
    assert _dispatch(email, "remote-fence-1", attempt=2)["key"] == "remote-fence-1"


def test_fail_rule_is_unknown_not_a_rejection(service: Service) -> None:
    """Goal: a 500 without proof must never be read as "not applied".

    Method: a fail rule on `legacy`; the remote effect function raises, and what it raises is
    not an EffectRejectedError.
    """
    service.rules({"participant": "legacy", "action": "fail"})
    with pytest.raises(Exception) as caught:  # noqa: PT011 - asserting what it is NOT.
        _dispatch(_remote(service, "legacy"), "remote-fail-1")
    assert not isinstance(caught.value, EffectRejectedError)
    assert isinstance(caught.value, RemoteOutcomeUnknown)
    assert caught.value.status == 500


def test_timeout_is_unknown_not_a_rejection(service: Service) -> None:
    """Goal: a dispatch that times out (the request may still apply) is not a rejection.

    Method: hold `legacy` requests and dispatch with a 1 s timeout from another thread; once
    the service holds the request (it reached the participant, so it may apply), the client's
    timeout comes: an httpx timeout error propagates; then drop the held request. (The hold is
    awaited first: on a loaded machine a shorter timeout could fire before the request is
    even sent, and then nothing is held.)
    """
    service.rules({"participant": "legacy", "action": "hold"})
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        call = pool.submit(
            _dispatch, _remote(service, "legacy", timeout_seconds=1.0), "remote-timeout-1"
        )
        assert service.wait_held(1) == 1
        with pytest.raises(httpx.TimeoutException):
            call.result(timeout=30)
    assert service.release("drop") == 1


def test_unreachable_service_is_not_a_rejection() -> None:
    """Goal: a transport failure propagates instead of being mistaken for a rejection.

    Method: point a remote participant at a port nobody listens on: httpx.ConnectError.
    """
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
        ghost = remote_participant(
            "ghost",
            url,
            operations={"op": "reversible"},
            deduplicates=False,
            has_lookup=False,
        )
        with pytest.raises(httpx.ConnectError):
            _dispatch(ghost, "ghost-1")


def test_shared_client_is_closed_when_the_loop_ends(service: Service) -> None:
    """Goal: the adapter's per-loop client does not outlive its event loop.

    Method: dispatch twice inside one asyncio.run (one client reused), keep a reference to the
    client, and check it is closed once asyncio.run returned, without calling aclose().
    """
    legacy = _remote(service, "legacy")
    seen: list[httpx.AsyncClient] = []

    async def twice() -> None:
        for key in ("client-1", "client-2"):
            effect = legacy.effects["op"].function
            await effect(
                EffectCall(
                    participant="legacy",
                    operation="op",
                    idempotency_key=IdempotencyKey(key),
                    effect_id=EffectId(key),
                    instance_id=InstanceId("instance-1"),
                    attempt=1,
                    payload=None,
                )
            )
            seen.append(await legacy._client())

    asyncio.run(twice())
    gc.collect()
    assert seen[0] is seen[1]
    assert seen[0].is_closed


def test_in_process_service_stops_even_with_a_held_request(tmp_path: Path) -> None:
    """Goal: start_in_thread serves the same protocol and its stop never hangs on a hold.

    Method: start in a thread, hold one request, stop: the held request is answered 503 (dropped,
    so not applied), the thread ends, and the ledger file holds the received row.
    """
    url, stop = start_in_thread(tmp_path, [ParticipantSpec("solo", lookup=True)])
    try:
        assert httpx.get(f"{url}/health", timeout=REQUEST_SECONDS).status_code == 200
        assert (tmp_path / "service.url").read_text().strip() == url
        with httpx.Client(base_url=url, timeout=REQUEST_SECONDS) as http:
            in_process = Service(url=url, http=http)
            in_process.rules({"participant": "solo", "action": "hold"})
            pending = _apply_in_background(in_process, "solo", "stop-1")
            assert in_process.wait_held(1) == 1
    finally:
        stop()
    assert pending.result(timeout=REQUEST_SECONDS).status_code == 503
    with contextlib.closing(sqlite3.connect(tmp_path / "solo.participant.db")) as db:
        assert db.execute("SELECT count(*) FROM received").fetchone() == (1,)
        assert db.execute("SELECT count(*) FROM applied").fetchone() == (0,)


def _compensating(service: Service, participant: str) -> RemoteParticipant:
    return remote_participant(
        participant,
        service.url,
        operations={"op": "compensatable"},
        deduplicates=False,
        has_lookup=False,
        compensations={"op": "undo"},
        preconditions=True,
    )


def _compensation_call(participant: RemoteParticipant, original: str) -> EffectCall:
    return EffectCall(
        participant=participant.name,
        operation="undo",
        idempotency_key=IdempotencyKey(f"compensate:{original}"),
        effect_id=EffectId(f"{original}/compensation"),
        instance_id=InstanceId("instance-1"),
        attempt=1,
        payload={"amount": 5},
        original_key=IdempotencyKey(original),
        original_evidence={"applied": True},
    )


def _precondition(participant: RemoteParticipant, original: str) -> Precondition:
    check = participant.effects["undo"].precondition
    assert check is not None
    answer = _run(check(_compensation_call(participant, original)))
    assert isinstance(answer, Precondition)
    return answer


def test_reject_final_rule_is_a_final_rejection(service: Service) -> None:
    """Goal: `reject_final` lets a participant refuse a step for good (e.g. sold out).

    Method: a reject_final rule on `legacy`; the adapter raises EffectRejectedError with
    `retryable=False`; the request is received, nothing is applied.
    """
    service.rules({"participant": "legacy", "action": "reject_final"})
    with pytest.raises(EffectRejectedError) as caught:
        _dispatch(_remote(service, "legacy"), "final-1")
    assert caught.value.retryable is False
    ledger = service.ledger("legacy", "final-1")
    assert (len(ledger["received"]), len(ledger["applied"])) == (1, 0)


def test_rule_matching_an_operation_spares_the_others(service: Service) -> None:
    """Goal: a rule naming an operation fails only that operation, as often as `times` says.

    Method: a 1000-shot reject_final rule on `legacy` operation `undo`: three compensation
    dispatches are refused, while the original operation `op` of the same participant applies.
    """
    service.rules(
        {"participant": "legacy", "operation": "undo", "action": "reject_final", "times": 1000}
    )
    legacy = _compensating(service, "legacy")
    assert _dispatch(legacy, "spared-1")["operation"] == "op"
    call = _compensation_call(legacy, "spared-1")
    for _ in range(3):
        with pytest.raises(EffectRejectedError):
            _run(legacy.effects["undo"].function(call))
    ledger = service.ledger("legacy", call.idempotency_key)
    assert (len(ledger["received"]), len(ledger["applied"])) == (3, 0)


def test_held_request_released_as_a_final_rejection(service: Service) -> None:
    """Goal: a held request can be answered with a final rejection once the test is ready.

    Method: hold a `legacy` apply, wait (bounded) until held, release with `reject_final`:
    the caller gets 409 not retryable, and nothing is applied.
    """
    service.rules({"participant": "legacy", "key_contains": "held-final-1", "action": "hold"})
    pending = _apply_in_background(service, "legacy", "held-final-1")
    assert service.wait_held(1) == 1
    assert service.release("reject_final") == 1
    response = pending.result(timeout=REQUEST_SECONDS)
    assert response.status_code == 409
    assert response.json()["retryable"] is False
    assert service.ledger("legacy", "held-final-1")["applied"] == []


def test_remote_participant_declares_compensations(service: Service) -> None:
    """Goal: `compensations` declares each original with its compensating operation.

    Method: build a remote participant with {"op": "undo"}: `op` names `undo`, which is a
    compensation declaration with the precondition and the participant's retry policy.
    """
    legacy = _compensating(service, "legacy")
    original, undo = legacy.effects["op"], legacy.effects["undo"]
    assert original.compensation == "undo"
    assert legacy.compensation_of(original) is undo
    assert undo.is_compensation
    assert undo.precondition is not None
    assert undo.retry == original.retry
    without = _remote(service, "legacy")
    assert without.effects["op"].compensation is None


def test_compensation_applies_under_its_own_key(service: Service) -> None:
    """Goal: a compensation goes to the same participant under its own key and operation.

    Method: apply an original through the adapter, then the compensation function with the
    call the engine would build: the participant's ledger holds one application of `undo` under
    `compensate:` + the original key, with the original's payload; the original stays applied.
    """
    legacy = _compensating(service, "legacy")
    _dispatch(legacy, "undo-1")
    call = _compensation_call(legacy, "undo-1")
    receipt = _run(legacy.effects["undo"].function(call))
    assert receipt["key"] == "compensate:undo-1"
    assert receipt["operation"] == "undo"
    [row] = service.ledger("legacy", "compensate:undo-1")["applied"]
    assert (row["operation"], row["payload"]) == ("undo", {"amount": 5})
    assert len(service.ledger("legacy", "undo-1")["applied"]) == 1


def test_precondition_verdicts_follow_the_participant_state(service: Service) -> None:
    """Goal: the precondition reads the participant's current state: never applied, applied,
    reversed by someone else.

    Method: ask through the adapter about an original never applied (violated, with the
    reason), apply it (holds), mark it reversed by a clerk via `/_control/reverse` (satisfied,
    evidence naming the clerk); a second reversal does not rewrite who reversed it first.
    """
    legacy = _compensating(service, "legacy")
    key = "pre 1/r1/s1?x=%2F"
    before = _precondition(legacy, key)
    assert before.verdict is PreconditionVerdict.VIOLATED
    assert before.reason == f"nothing to undo: {key} was never applied"
    _dispatch(legacy, key)
    assert _precondition(legacy, key) == Precondition.holds()
    for by in ("clerk", "someone-later"):
        response = service.http.post(
            "/_control/reverse", json={"participant": "legacy", "key": key, "by": by}
        )
        assert response.status_code == 200
    assert _precondition(legacy, key) == Precondition.satisfied({"reversed_by": "clerk"})
    assert [row["reversed_by"] for row in service.ledger("legacy", key)["reversed"]] == ["clerk"]


def test_reverse_control_refuses_malformed_requests(service: Service) -> None:
    """Goal: the drift control refuses what it cannot record rather than guess.

    Method: post an unknown participant, a missing key and a non-JSON body: each is a 400.
    """
    for body in (
        {"participant": "ghost", "key": "k", "by": "x"},
        {"participant": "legacy", "by": "x"},
    ):
        assert service.http.post("/_control/reverse", json=body).status_code == 400
    assert service.http.post("/_control/reverse", content=b"{").status_code == 400


def test_unreadable_precondition_raises(service: Service) -> None:
    """Goal: a precondition answer that proves nothing is never read as a verdict.

    Method: a remote participant whose name the service does not host: the precondition
    endpoint answers 404, and the adapter raises RemotePreconditionError with that status.
    """
    ghost = _compensating(service, "ghost")
    with pytest.raises(RemotePreconditionError) as caught:
        _precondition(ghost, "ghost-1")
    assert caught.value.status == 404


def test_an_idempotency_key_header_naming_another_key_is_refused(service: Service) -> None:
    """Goal: the demo service, like the kit, refuses a request whose Idempotency-Key header
    and body disagree, and accepts the header the engine's adapter sends.

    Method: post to `payment` with another key in the header (400, nothing received or
    applied); then dispatch through the remote adapter, which sends the header: applied."""
    response = service.http.post(
        "/payment/apply",
        json={"key": "header-1", "operation": "op", "payload": None, "attempt": 1},
        headers={"Idempotency-Key": '"header-2"'},
    )
    assert response.status_code == 400
    ledger = service.ledger("payment", "header-1")
    assert (ledger["received"], ledger["applied"]) == ([], [])
    assert (
        _dispatch(_remote(service, "payment", deduplicates=True), "header-1")["key"] == "header-1"
    )
