"""What a client of the API sends and reads back under one name each, and what it is told when
its request does not validate (issue 24).

Requests said ``workflow``/``key`` where every response says ``workflow_name``/``business_key``:
the start body and the listings' filter now take the responses' names, and the old ones are
deprecated aliases until 0.3.0 (an answer to a request that used one carries ``Deprecation:
true``; both names with two values are a 422, never a silent choice). A body missing a field
was answered "the request is not valid: body.workflow: Field required" under a title about
JSON encoding; the detail now says which field is missing from where. In-process over a real
SQLite journal, through Starlette's TestClient.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning
from wait_workflows import registry

from ledgerflow.operators.service import Operations
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    with Operations(url, registry=registry, migrate=None) as operations:
        token, _ = operations.tokens().create(
            name="app", role="operator", tenant="default", created_by="test"
        )
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(url, registry=registry), headers=headers) as client:
        yield client


def _start(api: TestClient, body: dict[str, Any]) -> Any:
    return api.post("/v1/instances", json=body)


def test_a_start_takes_the_names_its_answer_uses(api: TestClient) -> None:
    """Goal: ``workflow_name`` and ``business_key`` start an instance, with no deprecation;
    the answer names them the same way. Method: POST one; read the fields and headers."""
    started = _start(api, {"workflow_name": "approve", "business_key": "k-1"})
    assert started.status_code == 201, started.text
    instance = started.json()["instance"]
    assert (instance["workflow_name"], instance["business_key"]) == ("approve", "k-1")
    assert "Deprecation" not in started.headers


def test_the_old_names_still_start_and_say_they_are_deprecated(api: TestClient) -> None:
    """Goal: a client written against the old names keeps working, and is told (not broken
    silently): the same instance, ``Deprecation: true``. Method: start with the new names,
    then the same key with ``workflow``/``key`` (200, the same instance), and with each old
    name mixed with a new one."""
    first = _start(api, {"workflow_name": "approve", "business_key": "k-2"}).json()
    old = _start(api, {"workflow": "approve", "key": "k-2"})
    assert old.status_code == 200, old.text
    assert old.json()["instance"]["instance_id"] == first["instance"]["instance_id"]
    assert old.headers["Deprecation"] == "true"
    mixed = _start(api, {"workflow": "approve", "business_key": "k-2"})
    assert mixed.status_code == 200
    assert mixed.headers["Deprecation"] == "true"
    same = _start(api, {"workflow": "approve", "workflow_name": "approve", "key": "k-2"})
    assert same.status_code == 200


def test_two_values_under_a_name_and_its_alias_are_refused(api: TestClient) -> None:
    """Goal: ``workflow`` and ``workflow_name`` naming two workflows is a 422 saying so, and
    nothing starts. Method: POST both; read the problem; list the instances."""
    both = _start(api, {"workflow_name": "approve", "workflow": "other", "business_key": "k"})
    assert both.status_code == 422
    assert "'workflow' is the deprecated name of 'workflow_name'" in both.json()["detail"]
    assert api.get("/v1/instances").json()["items"] == []


def test_a_missing_field_is_named_in_the_detail(api: TestClient) -> None:
    """Goal: the detail says which field is missing and that it is required, and names an
    unknown field as one (issue 24: "body.workflow: Field required" under a title about JSON).
    Method: a start without its business key; one with a typo; the title too."""
    missing = _start(api, {"workflow_name": "approve"})
    assert missing.status_code == 422
    problem = missing.json()
    assert problem["code"] == "LF110"
    assert problem["detail"] == (
        "the request is not valid: 'business_key' is required and missing from the body"
    )
    assert "missing" in problem["title"]
    assert problem["errors"][0]["where"] == "body.business_key"
    typo = _start(api, {"workflow_name": "approve", "business_key": "k", "inptu": 1})
    assert typo.json()["detail"] == (
        "the request is not valid: 'inptu' in the body is not a field this route takes (a typo?)"
    )


def test_the_listings_filter_by_workflow_name(api: TestClient) -> None:
    """Goal: ``?workflow_name=`` filters instances and attention; ``?workflow=`` still does
    (deprecated); two values are a 422. Method: start one instance; list with each."""
    _start(api, {"workflow_name": "approve", "business_key": "k-3"})
    for query in ("workflow_name=approve", "workflow=approve"):
        items = api.get(f"/v1/instances?{query}").json()["items"]
        assert [i["business_key"] for i in items] == ["k-3"], query
        assert api.get(f"/v1/instances?{query.replace('approve', 'nope')}").json()["items"] == []
        assert api.get(f"/v1/attention?{query}").status_code == 200
    both = api.get("/v1/instances?workflow_name=approve&workflow=nope")
    assert both.status_code == 422
    assert "deprecated name of 'workflow_name'" in both.json()["detail"]


def test_the_openapi_document_names_the_aliases_deprecated(api: TestClient) -> None:
    """Goal: the document (generated from the models) says ``workflow_name``/``business_key``
    and marks the old names deprecated; either name of each is required. Method: read it."""
    document = api.get("/v1/openapi.json").json()
    schema = document["components"]["schemas"]["StartBody"]
    assert schema["properties"]["workflow"]["deprecated"] is True
    assert schema["properties"]["key"]["deprecated"] is True
    assert "deprecated" not in schema["properties"]["workflow_name"]
    assert {"anyOf": [{"required": ["workflow_name"]}, {"required": ["workflow"]}]} in schema[
        "allOf"
    ]
    parameters = document["paths"]["/v1/instances"]["get"]["parameters"]
    by_name = {p["name"]: p for p in parameters}
    assert by_name["workflow"]["deprecated"] is True
    assert "workflow_name" in by_name
