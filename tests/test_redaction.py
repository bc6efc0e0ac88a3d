"""One redaction function for every URL that is printed or logged (issue 15)."""

from __future__ import annotations

import pytest

from ledgerflow.redaction import MASK, redact

SECRET = "s3cretPW"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"postgresql://postgres:{SECRET}@host/x", "postgresql://postgres:***@host/x"),
        (f"postgresql+psycopg://u:{SECRET}@h:5432/db?sslmode=require", "@h:5432/db?sslmode"),
        (f"postgres://u:{SECRET}@h1:5432,h2:5433/db", "u:***@h1:5432,h2:5433/db"),
        (f"postgresql://h/db?user=u&password={SECRET}&sslmode=require", "password=***&ssl"),
        (f"postgresql://h/db?sslpassword={SECRET}", "sslpassword=***"),
        (f"host=h user=u password={SECRET} dbname=d", "password=*** dbname=d"),
        (f"host=h password='{SECRET} with space' dbname=d", "password=*** dbname=d"),
        (f"cannot reach postgresql://u:{SECRET}@h/db: refused", "u:***@h/db: refused"),
        # A password holding '@' or '/' (unencoded) is still hidden whole.
        (f"postgresql://u:{SECRET}@x/y@h/db", "postgresql://u:***@h/db"),
    ],
)
def test_passwords_are_hidden_and_the_rest_is_kept(text: str, shown: str) -> None:
    """Goal: a password in a URL's user part or in a password parameter never survives, and
    the rest of the text (host, database, other parameters) does, for the operator to read.

    Method: redact each shape; the secret is gone, the mask and the expected rest are there.
    """
    redacted = redact(text)
    assert SECRET not in redacted
    assert MASK in redacted
    assert shown in redacted


@pytest.mark.parametrize(
    "text",
    [
        "sqlite:///orders.db",
        "postgresql://postgres@127.0.0.1:5432/db?application_name=a@b",
        "postgresql://h:5432/db",
        "worker w-1 running on postgresql://u@h/db",
    ],
)
def test_text_without_a_secret_is_unchanged(text: str) -> None:
    """Goal: redaction hides secrets only. Method: text without one comes back as it was."""
    assert redact(text) == text
