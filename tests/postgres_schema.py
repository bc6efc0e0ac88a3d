"""A fresh PostgreSQL schema per test, or a clear skip when no server is configured.

Tests that need PostgreSQL read its URL from ``LEDGERFLOW_TEST_POSTGRES_URL``; CI sets it (and
fails if the server is unreachable), a newcomer without PostgreSQL sees these tests skipped
with that reason.
"""

from __future__ import annotations

import hashlib
import os

import pytest

ENVIRONMENT_VARIABLE = "LEDGERFLOW_TEST_POSTGRES_URL"


def postgres_url(test_name: str) -> str:
    base = os.environ.get(ENVIRONMENT_VARIABLE)
    if not base:
        pytest.skip(
            f"PostgreSQL tests need {ENVIRONMENT_VARIABLE} (e.g. postgresql://postgres@127.0.0.1:5432/test)"
        )
    import psycopg

    # One schema per test and per xdist worker: a module's shared journal is built in every
    # worker that runs one of its tests, and two workers must not drop each other's.
    owner = f"{test_name} {os.environ.get('PYTEST_XDIST_WORKER', '')}"
    schema = "t_" + hashlib.sha256(owner.encode()).hexdigest()[:20]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return f"{base}?schema={schema}"
