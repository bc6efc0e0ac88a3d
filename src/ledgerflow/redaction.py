"""Secrets out of everything Ledgerflow prints or logs (internal).

A store URL may carry a password: in its user part (``postgresql://app:s3cret@db/ledger``) or
as a ``password=`` parameter (in the URL's query, or in a libpq ``key=value`` string). Every
place that shows a URL -- an error message, the worker's first log line, a command's output --
passes the text through :func:`redact` first, so the secret never reaches a terminal, a log
file or a bug report. It works on any text, not only on a URL alone, because a driver's
message may quote a URL or a connection string inside a sentence.

Example::

    redact("postgresql://app:s3cret@db/ledger?sslpassword=x")
    # 'postgresql://app:***@db/ledger?sslpassword=***'
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://  then the rest of the token (a URL ends at whitespace or a quote).
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>[^\s'\"<>]*)")
# password=..., sslpassword=... (any parameter whose name ends in "password"), quoted or not.
_PARAMETER = re.compile(
    r"(?P<name>\b[A-Za-z_]*password\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|[^\s&'\"]*)",
    re.IGNORECASE,
)


def _userinfo_redacted(match: re.Match[str]) -> str:
    rest = match.group("rest")
    # The user part ends at the last '@' before the query: a password may hold '/' or '@'
    # (libpq wants them percent-encoded, people do not always), a query value may hold '@'.
    head = rest.split("?", 1)[0]
    at = head.rfind("@")
    if at < 0:
        return match.group(0)
    user, colon, _secret = head[:at].partition(":")
    if not colon:
        return match.group(0)
    return f"{match.group('scheme')}{user}:{MASK}{rest[at:]}"


def redact(text: str) -> str:
    """``text`` with every password in a URL or a ``*password=`` parameter replaced by ***."""
    text = _URL.sub(_userinfo_redacted, text)
    return _PARAMETER.sub(lambda m: f"{m.group('name')}{MASK}", text)
