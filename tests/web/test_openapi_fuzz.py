"""schemathesis against ``/v1/openapi.json``: the API as its own document describes it, fuzzed
within a bounded time, on SQLite and on PostgreSQL.

``ledgerflow serve`` runs as its own process over a journal built by ``perimeter_world`` (so
some generated ids and keys exist); schemathesis runs as its own process too, with an admin
token of every tenant, a fixed seed and a time budget. Every check runs but one: no server
error, every status, content type, header and body as documented, invalid data refused,
authentication not ignored, wrong methods answered 405 with Allow. The check left out,
``positive_data_acceptance``, expects every schema-valid request to succeed; some cannot and
must not (a workflow the server does not carry, a cursor it never gave, a key that breaks the
naming rule): those are 4xx answers the document lists. The report is kept in the artifacts
folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from perimeter_world import build

from browser import artifacts

pytestmark = pytest.mark.slow

# The budget of one run, in seconds, and the examples per operation and phase.
FUZZ_SECONDS = 20
EXAMPLES = 20


def test_the_api_keeps_its_own_document(processes: Any, journal_url: str, tmp_path: Path) -> None:
    """Goal: 0 server errors and every response as documented, whatever schemathesis sends.

    Method: build the journal (both backends), serve it, run `schemathesis run` with every
    check but positive_data_acceptance for FUZZ_SECONDS; it must exit 0. Its output is saved
    as artifacts/console/../schemathesis-<backend>.txt.
    """
    world = build(journal_url)
    url, server = processes.server(db_url=journal_url)
    command = [
        *(sys.executable, "-m", "schemathesis.cli", "run", f"{url}/v1/openapi.json"),
        *("--header", f"Authorization: Bearer {world.tokens['root']}"),
        *("--checks", "all", "--exclude-checks", "positive_data_acceptance"),
        *("--max-examples", str(EXAMPLES), "--max-time", str(FUZZ_SECONDS)),
        *("--seed", "17", "--generation-database", "none", "--workers", "1"),
        *("--request-timeout", "10", "--no-color"),
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": ""}
    # Its own folder: schemathesis keeps a cache in the working directory.
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=FUZZ_SECONDS + 120,
        env=env,
        cwd=tmp_path,
    )
    backend = journal_url.split(":", 1)[0]
    report = artifacts().parent / f"schemathesis-{backend}.txt"
    report.write_text(done.stdout + done.stderr, encoding="utf-8")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Server error" not in done.stdout
    assert processes.stop(server) == 0, processes.tail()
    assert Path(report).stat().st_size > 0
