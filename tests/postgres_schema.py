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

    schema = "t_" + hashlib.sha256(test_name.encode()).hexdigest()[:20]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return f"{base}?schema={schema}"
