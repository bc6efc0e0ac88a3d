"""The API's request and response bodies, as pydantic models (internal).

These models are the declarations: FastAPI validates each request body against its model and
writes the same model into ``/v1/openapi.json``, so the document cannot drift from what is
enforced. Every integer and string has its bound here (the ids' own rules are applied again by
the naming rule behind the service); responses carry the ledger's records in the shapes of
:mod:`ledgerflow.operators.shapes`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ledgerflow import limits
from ledgerflow.model.authority import ACTOR_LENGTH_MAX

INT32_MAX = 2**31 - 1
# The largest integer every JSON reader keeps exactly (a double's 53 bits).
JSON_INTEGER_MAX = 2**53 - 1
Name = Annotated[str, Field(min_length=1, max_length=limits.NAME_LENGTH_MAX)]
EventText = Annotated[str, Field(min_length=1, max_length=limits.EVENT_ID_LENGTH_MAX)]
Key = Annotated[str, Field(min_length=1, max_length=limits.BUSINESS_KEY_LENGTH_MAX)]
Reason = Annotated[str, Field(min_length=1, max_length=1000)]
Seq = Annotated[int, Field(strict=True, ge=-INT32_MAX, le=INT32_MAX)]
Positive = Annotated[int, Field(strict=True, ge=1, le=INT32_MAX)]
# A time (epoch seconds) and a delay (seconds), both finite and bounded.
Moment = Annotated[float, Field(ge=0, le=1e11, allow_inf_nan=False)]
Delay = Annotated[float, Field(ge=0, le=limits.START_DELAY_SECONDS_MAX, allow_inf_nan=False)]
Window = Annotated[float, Field(gt=0, le=limits.START_DELAY_SECONDS_MAX, allow_inf_nan=False)]
TerminalStatus = Literal[
    "SUCCEEDED", "COMPENSATED", "FAILED", "CANCELLED", "FORWARD_RECOVERY_REQUIRED"
]
RepairKindName = Literal[
    "resolve-effect",
    "retry-step",
    "skip-step",
    "run-compensation",
    "skip-compensation",
    "resume",
    "force-terminal",
    "cancel",
]


class Body(BaseModel):
    """A request body: unknown fields are refused, not ignored (a typo must not pass)."""

    model_config = ConfigDict(extra="forbid")


# The request names that became the responses' own (issue 24), each still accepted as a
# deprecated alias until this release: old name -> name.
REMOVED_IN = "0.3.0"
START_ALIASES = {"workflow": "workflow_name", "key": "business_key"}


def _either_name(schema: dict[str, Any]) -> None:
    """The start body's schema: each name or its deprecated alias is required, not both."""
    required = schema.get("required", [])
    schema["required"] = [n for n in required if n not in START_ALIASES.values()]
    schema["allOf"] = [
        {"anyOf": [{"required": [name]}, {"required": [old]}]}
        for old, name in START_ALIASES.items()
    ]


def aliased(data: Any, aliases: dict[str, str]) -> Any:
    """``data`` with each deprecated alias's value under its name as well; the same value
    under both is taken, two values are refused."""
    if not isinstance(data, dict):
        return data
    merged = dict(data)
    for old, name in aliases.items():
        if old not in merged:
            continue
        if name in merged and merged[name] != merged[old]:
            raise ValueError(
                f"{old!r} is the deprecated name of {name!r} (until {REMOVED_IN}): give "
                f"{name!r} only"
            )
        merged[name] = merged[old]
    return merged


class StartBody(Body):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_either_name)

    workflow_name: Name = Field(
        description="the workflow to start, as responses name it (`workflow` is accepted as "
        f"its deprecated alias until {REMOVED_IN})"
    )
    business_key: Key = Field(
        description="the business key: starting it again returns the same instance (`key` is "
        f"accepted as its deprecated alias until {REMOVED_IN})"
    )
    input: Any = None
    version: Positive | None = Field(None, description="default: the newest the server carries")
    tenant: Name | None = Field(None, description="default: the token's tenant")
    start_at: Moment | None = Field(
        None, description="start no step before this time (epoch seconds): SCHEDULED until then"
    )
    start_in: Delay | None = Field(
        None, description="start no step before this many seconds from now (or start_at)"
    )
    if_running: Literal["return", "fail"] = Field(
        "return", description="when the key's instance is in flight: return it, or refuse (409)"
    )
    if_ended: Literal["return", "new_run", "new_run_if_failed", "fail"] = Field(
        "return",
        description="when the key's instance has ended: return it, start its next run "
        "(new_run_if_failed: unless it succeeded), or refuse (409)",
    )
    signal: EventText | None = Field(
        None, description="an event delivered to the instance in the start's transaction"
    )
    signal_event_id: EventText | None = Field(
        None, description="the signal's event id (the inbox keeps it once per id)"
    )
    signal_payload: Any = Field(None, description="the signal's payload")
    signal_wakes: bool = Field(
        False, description="the signal ends a delayed start's delay (it is due now)"
    )
    debounce_seconds: Window | None = Field(
        None,
        description="debounce starts of the key: due once no other start came for this long; "
        "a start while the instance is pending replaces its input (answered debounced)",
    )
    debounce_max_seconds: Window | None = Field(
        None,
        description="a debounced start is due at the latest this long after the window's "
        "first start (default: 10 windows)",
    )
    workflow: Name | None = Field(
        None, deprecated=True, description=f"deprecated alias of workflow_name (until {REMOVED_IN})"
    )
    key: Key | None = Field(
        None, deprecated=True, description=f"deprecated alias of business_key (until {REMOVED_IN})"
    )

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        return aliased(data, START_ALIASES)

    def deprecated_names(self) -> list[str]:
        """The deprecated aliases this request used (read without the warning an attribute
        access of a deprecated field gives)."""
        return [old for old in START_ALIASES if self.__dict__.get(old) is not None]


class CancelBody(Body):
    reason: Reason
    compensate: bool = True


class SignalBody(Body):
    event_id: EventText = Field(description="the event's id: sending it again is a no-op")
    payload: Any = None
    sender: Annotated[str, Field(max_length=ACTOR_LENGTH_MAX)] | None = Field(
        None, description="only the authenticated principal's own name is accepted"
    )
    step: Seq | None = None
    run: Positive | None = None


class UpdateBody(Body):
    update_id: EventText = Field(
        description="the update's id: sending it again returns the first reply and stores nothing"
    )
    payload: Any = None
    timeout: float = Field(
        10.0,
        ge=0,
        le=limits.UPDATE_WAIT_SECONDS_MAX,
        description="how long to wait for the reply (202 without it when it takes longer)",
    )


class ValueOut(BaseModel):
    name: str
    published: bool = Field(description="false: nothing was published under this name (yet)")
    value: Any = None
    version: int = Field(0, description="1 for the first publication, one more each time")
    run: int | None = None
    seq: int | None = None
    published_at: float | None = None


class UpdateOut(BaseModel):
    update_id: str
    instance_id: str
    name: str
    replied: bool = Field(description="false: stored, not answered within the timeout")
    reply: Any = None


class CompletionBody(Body):
    idempotency_key: Key
    applied: bool
    evidence: Any = None
    reason: Reason | None = None
    event_id: EventText | None = None


class RetireBody(Body):
    reason: Reason


class RetireOut(BaseModel):
    outcome: Literal["applied", "no-op"]
    audit_id: int
    message: str
    evidence: Record = Field(
        description="what the journal held: instances per status, the last ended"
    )


class RepairBody(Body):
    kind: RepairKindName
    reason: Reason
    seq: Seq | None = None
    applied: bool | None = None
    evidence: Any = None
    result: Any = None
    status: TerminalStatus | None = None
    compensate: bool = True
    resume: bool = False
    planned_generation: (
        Annotated[int, Field(strict=True, ge=0, le=limits.REQUEST_INTEGER_MAX)] | None
    ) = Field(
        None,
        description="apply only if the instance is still at the generation a dry run showed",
    )


# -- responses -----------------------------------------------------------------------------------


class Record(BaseModel):
    """A ledger record: its fields, enums by value, JSON text fields decoded."""

    model_config = ConfigDict(extra="allow")


class InstanceOut(Record):
    instance_id: str
    tenant: str
    workflow_name: str
    workflow_version: int
    fingerprint: str
    business_key: str
    run: int
    status: str
    generation: int
    created_at: float
    updated_at: float


class InstancePageOut(BaseModel):
    items: list[InstanceOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


class DetailOut(BaseModel):
    instance: InstanceOut
    steps: list[Record]
    effects: list[Record]
    events: list[Record] = Field(description="the timeline's first page, oldest first")
    events_next_cursor: str | None = Field(
        description="the next page: GET .../timeline?cursor=; null: none"
    )
    inbox: list[Record] = Field(description="the inbox's first page, oldest first")
    inbox_next_cursor: str | None = Field(
        description="the next page: GET .../inbox?cursor=; null: none"
    )
    inbox_refused: Record | None = Field(
        description="the events refused because the inbox was full (counted, not kept)"
    )
    flags: list[Record]
    audit: list[Record]
    children: list[InstanceOut] = Field(
        default_factory=list,
        description="the child workflows it started, oldest first (the first page); its parent "
        "is the instance's parent_instance_id",
    )
    values: list[Record] = Field(
        default_factory=list,
        description="what it published (ctx.publish; an update's reply is update:ID), by name",
    )


class PageOut(BaseModel):
    items: list[Record]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


class StartedOut(BaseModel):
    created: bool
    # The start was debounced into the key's pending instance (its input replaced, its time moved).
    debounced: bool = False
    instance: InstanceOut


class ResultOut(BaseModel):
    instance_id: str
    status: Literal["SUCCEEDED"]
    result: Any


class DeliveryOut(BaseModel):
    outcome: str
    event_id: str
    instance_id: str
    name: str
    state: str
    reason: str | None


class ListingOut(BaseModel):
    items: list[Record]


class RepairOut(BaseModel):
    outcome: Literal["dry-run", "applied", "no-op"]
    audit_id: int | None
    message: str
    generation: int = Field(description="the generation the plan starts from")
    plan: list[str] = Field(description="the plan, line by line")
    changes: Record


class Health(BaseModel):
    status: Literal["ok"]
