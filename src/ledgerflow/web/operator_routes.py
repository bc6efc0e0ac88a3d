"""The API's operator routes: the attention queue, repairs (dry run and apply), the audit log,
reconciliation runs, definition versions, the live workers and the held durable locks (internal).

A repair is planned with ``POST .../repairs/plan`` (a dry run: nothing is written) and applied
with ``POST .../repairs``; a client that showed a plan passes its ``generation`` as
``planned_generation`` so that the repair applies only to the state the plan was made from.
The actor of a repair is always the authenticated principal.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Annotated, Any

from fastapi import Path, Query, Request
from fastapi.responses import Response

from ledgerflow import InstanceStatus, limits
from ledgerflow.model.ids import InstanceId
from ledgerflow.operators.service import (
    ACTION_KINDS,
    ApiRole,
    RepairKind,
    RepairRequest,
    RepairResult,
)
from ledgerflow.operators.shapes import listing, record_json
from ledgerflow.web.declare import (
    DeprecatedWorkflow,
    InstanceIdPath,
    Outcome,
    Scoped,
    answer,
    api_route,
    api_router,
    one_name,
)
from ledgerflow.web.models import (
    JSON_INTEGER_MAX,
    ListingOut,
    RepairBody,
    RepairOut,
    RetireBody,
    RetireOut,
)

router = api_router(tags=["operators"])

Text = Annotated[str | None, Query(min_length=1, max_length=limits.NAME_LENGTH_MAX)]
AUDIT_KINDS = "|".join([k.value for k in RepairKind] + list(ACTION_KINDS))


@api_route(
    router, "GET", "/attention", role=ApiRole.VIEWER, response_model=ListingOut,
    summary="What needs a person: parked instances and open flags, oldest first",
)  # fmt: skip
def attention(
    scoped: Scoped,
    workflow_name: Text = None,
    workflow: DeprecatedWorkflow = None,
    reason: Text = None,
    limit: Annotated[int, Query(ge=1, le=limits.PAGE_SIZE_MAX)] = limits.PAGE_SIZE_DEFAULT,
) -> Any:
    name = one_name(workflow_name, workflow, name="workflow_name", old="workflow")
    items = scoped.attention(workflow=name, reason=reason, limit=limit)
    return listing([item.to_json() for item in items])


def repair_request(instance_id: str, body: RepairBody) -> RepairRequest:
    """A repair as the service takes it; the actor is set to the principal by the service."""
    return RepairRequest(
        kind=RepairKind(body.kind),
        instance_id=InstanceId(instance_id),
        actor="(the principal)",
        reason=body.reason,
        seq=body.seq,
        applied=body.applied,
        evidence=body.evidence,
        result=body.result,
        status=InstanceStatus(body.status) if body.status else None,
        compensate=body.compensate,
        resume=body.resume,
    )


def repair_json(result: RepairResult) -> dict[str, Any]:
    return {
        "outcome": result.outcome,
        "audit_id": result.audit_id,
        "message": result.message,
        "generation": result.plan.generation,
        "plan": result.plan.describe(),
        "changes": result.plan.to_json(),
    }


@api_route(
    router, "POST", "/instances/{instance_id}/repairs/plan", role=ApiRole.OPERATOR,
    response_model=RepairOut, errors=(404,),
    summary="A repair's dry run: the exact plan, nothing written",
)  # fmt: skip
def plan_repair(
    request: Request, scoped: Scoped, instance_id: InstanceIdPath, body: RepairBody
) -> Response:
    def carry_out() -> Outcome:
        return 200, repair_json(scoped.plan(repair_request(instance_id, body)))

    return answer(request, carry_out)


@api_route(
    router, "POST", "/instances/{instance_id}/repairs", role=ApiRole.OPERATOR,
    response_model=RepairOut, errors=(404,),
    summary="Apply a repair with its audit record (or refuse it, on the record)",
)  # fmt: skip
def apply_repair(
    request: Request, scoped: Scoped, instance_id: InstanceIdPath, body: RepairBody
) -> Response:
    def carry_out() -> Outcome:
        result = scoped.apply(
            repair_request(instance_id, body), planned_generation=body.planned_generation
        )
        return 200, repair_json(result)

    return answer(request, carry_out)


@api_route(
    router, "GET", "/audit", role=ApiRole.VIEWER, response_model=ListingOut,
    summary="The audit log of the token's tenant: the newest records, oldest first",
)  # fmt: skip
def audit(
    scoped: Scoped,
    instance_id: Annotated[str | None, Query(min_length=1, max_length=300)] = None,
    actor: Text = None,
    kind: Annotated[str | None, Query(pattern=f"^({AUDIT_KINDS})$")] = None,
    since: Annotated[float | None, Query(ge=0, le=1e11, allow_inf_nan=False)] = None,
    before_id: Annotated[int | None, Query(ge=1, le=JSON_INTEGER_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=limits.PAGE_SIZE_MAX)] = limits.PAGE_SIZE_DEFAULT,
) -> Any:
    records = scoped.audit(
        instance_id=instance_id,
        actor=actor,
        kind=kind,
        since=since,
        before_id=before_id,
        limit=limit,
    )
    return listing([record_json(r) for r in records])


@api_route(
    router, "GET", "/reconciliations", role=ApiRole.VIEWER, response_model=ListingOut,
    summary="Reconciliation runs, newest first (to a token that sees every tenant)",
)  # fmt: skip
def reconciliations(
    scoped: Scoped,
    limit: Annotated[int, Query(ge=1, le=limits.PAGE_SIZE_MAX)] = 20,
) -> Any:
    runs = scoped.reconciliations(limit=limit)
    return listing([{**record_json(r), "details": list(r.details)} for r in runs])


@api_route(
    router, "GET", "/versions", role=ApiRole.VIEWER, response_model=ListingOut,
    summary="Per workflow, version and fingerprint: instances by status, the oldest in "
    "flight, whether retired",
)  # fmt: skip
def versions(scoped: Scoped) -> Any:
    now = time.time()
    return listing([v.to_json(now=now) for v in scoped.version_summaries()])


@api_route(
    router, "POST", "/versions/{workflow}/{version}/retire", role=ApiRole.ADMIN,
    response_model=RetireOut,
    summary="Retire a workflow version (refused while instances are in flight on it); the "
    "evidence goes to the audit log",
)  # fmt: skip
def retire_version(
    request: Request,
    scoped: Scoped,
    workflow: Annotated[str, Path(min_length=1, max_length=limits.NAME_LENGTH_MAX)],
    version: Annotated[int, Path(ge=1, le=JSON_INTEGER_MAX)],
    body: RetireBody,
) -> Response:
    def carry_out() -> Outcome:
        done = scoped.retire(workflow, version, reason=body.reason)
        return 200, {
            "outcome": done.outcome,
            "audit_id": done.audit_id,
            "message": done.message,
            "evidence": dataclasses.asdict(done.evidence),
        }

    return answer(request, carry_out)


@api_route(
    router, "GET", "/workers", role=ApiRole.VIEWER, response_model=ListingOut,
    summary="The live workers: heartbeat, slots and the definitions each serves",
)  # fmt: skip
def workers(scoped: Scoped) -> Any:
    return listing(scoped.workers())


@api_route(
    router, "GET", "/locks", role=ApiRole.VIEWER, response_model=ListingOut,
    summary="The held durable locks: holder (parked or not), since when, and each queue",
)  # fmt: skip
def locks(scoped: Scoped) -> Any:
    return listing(scoped.locks())
