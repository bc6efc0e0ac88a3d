"""A password planted in the PostgreSQL URLs of the CLI tests, and what the CLI printed.

The CLI suite runs its commands against PostgreSQL URLs that carry this password (the test
server trusts its users, so any password connects). Everything the commands print, and every
log record, is collected here; ``tests/cli/conftest.py`` fails any test after which the
password appears in it (issue 15, item 3: secrets never in output or logs).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

PASSWORD = "Pl4nted-Secr3t-15"
printed: list[str] = []


def url(base: str) -> str:
    """``base`` (a PostgreSQL URL) with the planted password in its user part."""
    parts = urlsplit(base)
    user = parts.username or "postgres"
    host = parts.hostname or "127.0.0.1"
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit(parts._replace(netloc=f"{user}:{PASSWORD}@{host}{port}"))


def record(*texts: str) -> None:
    printed.extend(texts)


def leaks() -> list[str]:
    """Every recorded text that holds the password."""
    return [text for text in printed if PASSWORD in text]
