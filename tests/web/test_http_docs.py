"""docs/http-api.md cannot drift from the app: every route is in its table with its role, and
every bound it quotes is the bound in ``ledgerflow.limits``.

In the manner of ``tests/cli/test_cli_docs.py``: the document is read and held to the code
(the routes as the OpenAPI document declares them, roles from ``x-required-role``).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from ledgerflow import limits
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

DOC = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"


def _documented() -> dict[tuple[str, str], str]:
    """(method, path) -> role, from the table under "## Routes"."""
    table = DOC.read_text(encoding="utf-8").split("## Routes", 1)[1].split("\n\n", 2)[1]
    rows = re.findall(r"^\| (GET|POST) \| `([^`]+)` \| (\w+) \|", table, re.MULTILINE)
    return {(method.lower(), path): role for method, path, role in rows}


def test_every_route_is_documented_with_its_role(tmp_path: Path) -> None:
    """Goal: the routes table of docs/http-api.md is the app's routes, each with the role the
    route declares.

    Method: serve a journal without authentication, read /v1/openapi.json; its operations
    (with x-required-role, 'none' for the health checks) plus the document route itself equal
    the table's rows.
    """
    app = create_app(f"sqlite:///{tmp_path}/docs.db", insecure_no_auth=True)
    with TestClient(app, base_url="http://localhost") as client:
        doc = client.get("/v1/openapi.json").json()
    declared = {
        (method, path): op.get("x-required-role", "none")
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
    }
    declared["get", "/v1/openapi.json"] = "viewer"
    assert _documented() == declared


@pytest.mark.parametrize(
    "phrase",
    [
        f"`limits.REQUEST_BODY_BYTES_MAX` | {limits.REQUEST_BODY_BYTES_MAX:,} bytes",
        f"`limits.JSON_DEPTH_MAX` | {limits.JSON_DEPTH_MAX} levels",
        f"`limits.PAGE_SIZE_MAX` | {limits.PAGE_SIZE_MAX}",
        f"`limits.IDEMPOTENCY_RETENTION_SECONDS` | {limits.IDEMPOTENCY_RETENTION_SECONDS:,} s",
        f"`limits.PAYLOAD_BYTES_MAX` | {limits.PAYLOAD_BYTES_MAX:,} bytes",
        f"`IDEMPOTENCY_KEY_LENGTH_MAX`, {limits.IDEMPOTENCY_KEY_LENGTH_MAX}",
        f"`limits.ANONYMOUS_BODY_BYTES_MAX` | {limits.ANONYMOUS_BODY_BYTES_MAX:,} bytes",
        f"`limits.JSON_VALUES_MAX` | {limits.JSON_VALUES_MAX:,} values",
        f"`limits.HTTP_HEADER_READ_SECONDS_DEFAULT`, {limits.HTTP_HEADER_READ_SECONDS_DEFAULT:g} s",
        f"`limits.HTTP_BODY_READ_SECONDS_DEFAULT`, {limits.HTTP_BODY_READ_SECONDS_DEFAULT:g} s",
        f"`limits.HTTP_KEEP_ALIVE_SECONDS`, {limits.HTTP_KEEP_ALIVE_SECONDS} s",
        f"`limits.HTTP_CONNECTIONS_MAX_DEFAULT`, {limits.HTTP_CONNECTIONS_MAX_DEFAULT:,}",
        f"`limits.HTTP_DESCRIPTORS_RESERVED` ({limits.HTTP_DESCRIPTORS_RESERVED})",
        f"`limits.HTTP_ACCEPTS_PER_WAKE_MAX` ({limits.HTTP_ACCEPTS_PER_WAKE_MAX})",
        f"`limits.HTTP_LISTEN_QUEUE`, {limits.HTTP_LISTEN_QUEUE:,}",
    ],
)
def test_documented_bounds_are_the_limits(phrase: str) -> None:
    """Goal: a bound the document quotes is the bound the code keeps.
    Method: each phrase, built from ``ledgerflow.limits``, is in the document."""
    assert phrase in " ".join(DOC.read_text(encoding="utf-8").split())
