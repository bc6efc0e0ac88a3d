"""``ledgerflow check-participant`` against real participant processes over HTTP.

The participant service runs as its own process (``python -m ledgerflow.demo.service``) and the
check as the command a participant team would run in its CI. ``check_cast`` declares ``pay``
with every promise; the service keeps all of them or breaks one, and each broken promise must
come back refuted, with the requests and answers that refute it, and exit 3.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from processes import LEDGERFLOW, ServiceProcess, child_environment

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
CLAIMS = [
    "dedupe",
    "lookup-before",
    "fence",
    "lookup-during",
    "lookup-after",
    "compensation-key",
    "key-window",
]


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LEDGERFLOW, "check-participant", *args],
        env=child_environment(HERE),
        capture_output=True,
        text=True,
        timeout=60,
    )


def checked(tmp_path: Path, spec: str) -> tuple[int, dict[str, Any], ServiceProcess]:
    """The JSON report of checking ``pay`` (declared with every promise) against a service
    hosting ``spec``; the service is left running for the caller to read its ledger."""
    process = ServiceProcess(tmp_path / "participants", [spec])
    service = process.start()
    try:
        done = check("check_cast:registry", "pay", "--url", service.url, "--json")
        assert done.stderr == "", done.stderr
        return done.returncode, json.loads(done.stdout), process
    except BaseException:
        process.stop()
        raise


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {claim["claim"]: claim["status"] for claim in report["claims"]}


def claim(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["claims"] if c["claim"] == name)


def test_an_honest_participant_proves_every_claim(tmp_path: Path) -> None:
    """Goal: a service that deduplicates, answers lookups truthfully and fences keeps every
    promise of its declaration: all proven, exit 0, and the check's keys are its own.

    Method: run the check against ``pay:dedupe+lookup``; read the participant's own ledger.
    """
    code, report, process = checked(tmp_path, "pay:dedupe+lookup")
    try:
        assert code == 0, report
        assert statuses(report) == dict.fromkeys(CLAIMS, "proven")
        assert report["run"].startswith("lf-check-")
        assert process.service is not None
        applied = process.service.ledger("pay")["applied"]
        assert applied
        assert all(
            row["key"].removeprefix("compensate:").startswith(report["run"]) for row in applied
        )
        # The dedupe claim's key was applied once though sent twice.
        assert sum(row["key"] == f"{report['run']}-dedupe" for row in applied) == 1
        assert claim(report, "key-window")["detail"]["declared_seconds"] == 7 * 24 * 3600
    finally:
        process.stop()


def test_a_participant_that_claims_dedupe_but_applies_twice_is_refuted(tmp_path: Path) -> None:
    """Goal: a declaration says ``deduplicates`` while the service applies a repeat again: the
    dedupe claim is refuted with both answers as evidence, and the check exits 3.

    Method: the service hosts ``pay:lookup`` (no dedupe); the receipts of the two sends differ
    and the participant's own ledger holds two applications of the key.
    """
    code, report, process = checked(tmp_path, "pay:lookup")
    try:
        assert code == 3
        assert statuses(report)["dedupe"] == "refuted"
        assert {s for n, s in statuses(report).items() if n != "dedupe"} == {"proven"}
        first, again = claim(report, "dedupe")["evidence"]
        assert first["answer"]["receipt"] != again["answer"]["receipt"]
        assert again["request"]["body"]["attempt"] == 2
        assert process.service is not None
        assert process.service.applied_count("pay", f"{report['run']}-dedupe") == 2
    finally:
        process.stop()


def test_a_participant_whose_lookup_lies_is_refuted(tmp_path: Path) -> None:
    """Goal: a lookup that answers not-applied for every key, fencing nothing, is caught: the
    late original applies after the "not applied" (fence refuted), an applied key is answered
    not-applied (lookup-after refuted), and lookups during an application disagree with it.

    Method: the service hosts ``pay:dedupe+lying-lookup``.
    """
    code, report, process = checked(tmp_path, "pay:dedupe+lying-lookup")
    try:
        assert code == 3
        found = statuses(report)
        assert found["lookup-before"] == "proven"  # a lie that happens to be true
        assert found["fence"] == "refuted"
        assert found["lookup-after"] == "refuted"
        assert found["lookup-during"] == "refuted"
        asked, late = claim(report, "fence")["evidence"]
        assert asked["answer"] == {"verdict": "not-applied"}
        assert late["status"] == 200
        assert late["request"]["body"]["attempt"] == 1
        assert "not-applied" in claim(report, "lookup-after")["summary"]
    finally:
        process.stop()


def test_a_participant_with_a_short_key_window_is_refuted(tmp_path: Path) -> None:
    """Goal: a service that remembers keys one second, though declared to keep them a week,
    is refuted on the key window, with the answer that reported it as evidence; every other
    claim (put within that second) holds.

    Method: the service hosts ``pay:dedupe+lookup+short-window``, whose applied answers say
    ``key_retention_seconds: 1``.
    """
    code, report, process = checked(tmp_path, "pay:dedupe+lookup+short-window")
    try:
        assert code == 3
        window = claim(report, "key-window")
        assert window["status"] == "refuted"
        assert window["detail"]["reported_seconds"] == 1.0
        assert window["detail"]["horizon_seconds"] > 1.0
        assert window["evidence"][0]["answer"]["key_retention_seconds"] == 1.0
        assert "less than the 604800 s declared" in window["summary"]
    finally:
        process.stop()


def test_the_human_report_is_a_table_of_claims(tmp_path: Path) -> None:
    """Goal: without --json the report is a table naming each claim and its status, with the
    requests and answers, and a count line.

    Method: run the check against ``pay:lookup`` without --json.
    """
    process = ServiceProcess(tmp_path / "participants", ["pay:lookup"])
    service = process.start()
    try:
        done = check("check_cast:registry", "pay", "--url", service.url)
    finally:
        process.stop()
    assert done.returncode == 3
    for name in CLAIMS:
        assert name in done.stdout
    assert "refuted" in done.stdout
    assert "POST /pay/apply key=<run>-dedupe" in done.stdout
    assert "6 proven, 1 refuted, 0 not claimed" in done.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["check_cast:registry", "pay", "--url", "http://127.0.0.1:9"], 1, "[LF708]"),
        (["check_cast:registry", "nobody"], 2, "declares no participant 'nobody'"),
        (["no_such_module:registry", "pay"], 2, "cannot import 'no_such_module'"),
        (["check_cast:registry", "pay", "--url", "ftp://x"], 2, "--url takes an http://"),
        (["check_cast:registry", "pay", "--operation", "ship"], 2, "no effect 'ship'"),
    ],
)
def test_what_cannot_be_checked_is_one_line(args: list[str], code: int, message: str) -> None:
    """Goal: an unreachable service, an unknown participant or effect, a module that does not
    import and a bad URL each end in one line naming the cause, no traceback.

    Method: run the command with each; read the exit code and stderr.
    """
    done = check(*args)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
