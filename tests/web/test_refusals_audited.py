"""Every refused change is on the audit log with its principal: the role-below and stale-plan
matrix over every state-changing operation, over the HTTP API and in the console (issue 22,
item 4). The app runs in-process over a real journal (``perimeter_world``), on SQLite and
PostgreSQL.

A refusal is recorded once, by the service that decides it, with the principal's name and
what was asked; a dry run writes nothing, a refused one neither.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from perimeter_world import World, build
from starlette.exceptions import StarletteDeprecationWarning
from test_console import sign_in
from test_perimeter import Api

from ledgerflow.errors import NotAuthorizedError
from ledgerflow.model.authority import ApiRole, Principal
from ledgerflow.operators.service import AuditQuery, AuditRecord, Operations
from ledgerflow.web import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


@pytest.fixture
def world(journal_url: str) -> World:
    world = build(journal_url)
    with Operations(journal_url) as operations:
        # An admin of one tenant: retiring a version concerns every tenant.
        world.tokens["ada"] = operations.tokens().create(
            name="ada", role="admin", tenant="acme", created_by="test"
        )[0]
    return world


@pytest.fixture
def api(world: World) -> Iterator[Api]:
    with TestClient(create_app(world.url), raise_server_exceptions=False) as client:
        yield Api(world, client)


def _newest(url: str) -> int:
    with Operations(url) as operations:
        records = operations.audit(AuditQuery(limit=1))
    return records[-1].audit_id if records else 0


def _recorded(url: str, act: Callable[[], httpx.Response]) -> tuple[httpx.Response, list[Any]]:
    """What ``act`` answered, and the audit records it appended."""
    before = _newest(url)
    response = act()
    with Operations(url) as operations:
        records = operations.audit(AuditQuery(limit=1000))
    return response, [r for r in records if r.audit_id > before]


def _one_refusal(records: list[AuditRecord], *, actor: str, kind: str, instance: Any) -> None:
    assert [(r.actor, r.kind, r.outcome, r.instance_id) for r in records] == [
        (actor, kind, "refused", instance)
    ], records
    assert records[0].refusal


def _effect_key(url: str, instance_id: str) -> str:
    with Operations(url) as operations:
        return str(operations.detail(instance_id).effects[0].idempotency_key)


def test_every_refused_change_over_the_api_has_one_refused_record(api: Api) -> None:
    """Goal: a token below a change's role, a token naming another tenant or another sender,
    a repair refused for its kind, a stale plan and a repair the state refuses are each
    answered 403 or 409 and recorded once as refused with the token's name; a refused dry run
    writes nothing.

    Method: for each case, the audit records appended by the request: exactly one, refused,
    by that principal, of that kind and instance. Repairs carry ``planned_generation`` as
    the console does.
    """
    world = api.world
    parked, waiting = world.parked, world.waiting
    generation = api.call(
        "POST",
        f"/v1/instances/{parked}/repairs/plan",
        by="olga",
        json={"kind": "resume", "reason": "plan"},
    ).json()["generation"]
    resume = {"kind": "resume", "reason": "try", "planned_generation": generation}
    key = _effect_key(world.url, parked)
    cases: list[tuple[str, str, str, dict[str, Any], int, str, str | None]] = [
        # (who, method path, body, status, kind, instance)
        ("victor", "POST", "/v1/instances", {"workflow": "pay", "key": "v"}, 403, "start", None),
        ("sam", "POST", "/v1/instances", {"workflow": "pay", "key": "s", "tenant": "globex"},
         403, "start", None),
        ("victor", "POST", f"/v1/instances/{waiting}/cancel", {"reason": "v"}, 403, "cancel",
         waiting),
        ("sam", "POST", f"/v1/instances/{waiting}/cancel", {"reason": "s"}, 403, "cancel",
         waiting),
        ("victor", "POST", f"/v1/instances/{waiting}/signals/shipped", {"event_id": "v"}, 403,
         "signal", waiting),
        ("sam", "POST", f"/v1/instances/{waiting}/signals/shipped",
         {"event_id": "s", "sender": "olga"}, 403, "signal", waiting),
        ("victor", "POST", "/v1/effects/completion", {"idempotency_key": key, "applied": True},
         403, "complete-effect", parked),
        ("victor", "POST", f"/v1/instances/{parked}/repairs", resume, 403, "resume", parked),
        ("sam", "POST", f"/v1/instances/{parked}/repairs", resume, 403, "resume", parked),
        ("olga", "POST", f"/v1/instances/{parked}/repairs",
         {"kind": "force-terminal", "status": "FAILED", "reason": "f",
          "planned_generation": generation}, 403, "force-terminal", parked),
        ("olga", "POST", f"/v1/instances/{parked}/repairs",
         {**resume, "planned_generation": generation + 7}, 409, "resume", parked),
        ("olga", "POST", f"/v1/instances/{parked}/repairs",
         {"kind": "retry-step", "seq": 1, "reason": "r", "planned_generation": generation},
         409, "retry-step", parked),
        ("olga", "POST", "/v1/versions/pay/1/retire", {"reason": "o"}, 403, "retire-version",
         None),
        ("ada", "POST", "/v1/versions/pay/1/retire", {"reason": "a"}, 403, "retire-version",
         None),
        ("root", "POST", "/v1/versions/pay/1/retire", {"reason": "r"}, 409, "retire-version",
         None),
    ]  # fmt: skip
    for who, method, path, body, status, kind, instance in cases:
        response, records = _recorded(
            world.url,
            lambda method=method, path=path, body=body, who=who: api.call(
                method, path, by=who, json=body
            ),
        )
        assert response.status_code == status, (who, path, body, response.text)
        _one_refusal(records, actor=who, kind=kind, instance=instance)
    dry, records = _recorded(
        world.url,
        lambda: api.call("POST", f"/v1/instances/{parked}/repairs/plan", by="victor", json=resume),
    )
    assert (dry.status_code, records) == (403, [])


def _csrf(client: TestClient, page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get(page).text)
    assert found is not None
    return found.group(1)


def test_every_refused_change_in_the_console_has_one_refused_record(world: World) -> None:
    """Goal: the console's changes (apply a repair, always with the plan's generation, and
    cancel) refused for the role, the repair's kind, a stale plan or the state are each on
    the record once, with the principal signed in.

    Method: sign in as victor (viewer) and sam (signaller): apply and cancel are 403, one
    refused record each; as olga (operator): force-terminal 403, a stale generation 409, a
    retry of a step that did not fail 409, one refused record each.
    """
    parked, waiting = world.parked, world.waiting
    repair = {"kind": "resume", "reason": "try", "seq": "", "applied": "", "evidence": "",
              "result": "", "status": "", "compensate": "yes", "resume": ""}  # fmt: skip
    with Operations(world.url) as operations:
        generation = operations.detail(parked).instance.generation
    for who in ("victor", "sam"):
        with TestClient(create_app(world.url), follow_redirects=False) as client:
            csrf = sign_in(client, world.tokens[who])
            for path, form, kind, instance in (
                (f"/console/instances/{parked}/repairs",
                 {**repair, "planned_generation": str(generation)}, "resume", parked),
                (f"/console/instances/{waiting}/cancel", {"reason": "no"}, "cancel", waiting),
            ):  # fmt: skip
                response, records = _recorded(
                    world.url,
                    lambda path=path, form=form, client=client, csrf=csrf: client.post(
                        path, data={**form, "csrf": csrf}
                    ),
                )
                assert response.status_code == 403, (who, path, response.text)
                _one_refusal(records, actor=who, kind=kind, instance=instance)
    with TestClient(create_app(world.url), follow_redirects=False) as client:
        csrf = sign_in(client, world.tokens["olga"])
        apply = f"/console/instances/{parked}/repairs"
        for form, status, kind in (
            ({**repair, "kind": "force-terminal", "status": "FAILED",
              "planned_generation": str(generation)}, 403, "force-terminal"),
            ({**repair, "planned_generation": str(generation + 3)}, 409, "resume"),
            ({**repair, "kind": "retry-step", "seq": "1",
              "planned_generation": str(generation)}, 409, "retry-step"),
        ):  # fmt: skip
            response, records = _recorded(
                world.url,
                lambda form=form: client.post(apply, data={**form, "csrf": csrf}),
            )
            assert response.status_code == status, (form, response.text)
            _one_refusal(records, actor="olga", kind=kind, instance=parked)
        assert "MANUAL_INTERVENTION" in client.get(f"/console/instances/{parked}").text


def test_a_routes_role_is_the_floor_of_every_call_it_makes(world: World) -> None:
    """Goal: a change route hands its declared role down as the floor of the service's calls,
    so a call that needs less is still held to the route's role, and refused on the record.

    Method: sam (signaller) through a service held to the operator floor: his signal, which
    alone needs signaller, is refused (NotAuthorizedError) and recorded; without the floor
    it is delivered.
    """
    sam = Principal(name="sam", role=ApiRole.SIGNALLER, tenant="acme")
    with Operations(world.url) as operations:
        held = operations.acting_as(sam, floor=ApiRole.OPERATOR)
        before = _newest(world.url)
        with pytest.raises(NotAuthorizedError, match="needs operator"):
            held.signal(
                world.waiting, "note", event_id="f", payload=None, sender=None, for_step=None,
                run=None,
            )  # fmt: skip
        records = [r for r in operations.audit(AuditQuery()) if r.audit_id > before]
        _one_refusal(records, actor="sam", kind="signal", instance=world.waiting)
        delivered = operations.acting_as(sam).signal(
            world.waiting, "note", event_id="f", payload=None, sender=None, for_step=None,
            run=None,
        )  # fmt: skip
        assert delivered.outcome.value == "accepted"
