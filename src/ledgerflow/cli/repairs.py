"""``ledgerflow repair ...`` and ``ledgerflow audit``: audited repairs from the command line
(internal).

Each repair command builds a :class:`~ledgerflow.operators.repairs.RepairRequest` and hands it
to the operators' service (:class:`~ledgerflow.operators.service.Operations`), whose repairs
check authority and state and write the audit record: the CLI decides nothing itself.
``--dry-run`` prints the exact plan and changes nothing. Who repairs is ``local:ACCOUNT``, the
account that runs the command, held to the grants of the authority file; or, with
``--token``, the token's principal, through the HTTP API's repair routes and held to its role.
Refusals are Ledgerflow errors (exit 1); a repeat of an applied repair is a no-op (exit 0).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click

from ledgerflow import limits
from ledgerflow.cli.api_client import quoted
from ledgerflow.cli.json_input import json_option_value
from ledgerflow.cli.options import (
    acting_options,
    api_of,
    authority_of,
    authority_option,
    db_option,
    echo_json,
    json_option,
    limit_option,
)
from ledgerflow.cli.render import cell, console, print_table
from ledgerflow.cli.tables import audit_json, audit_table
from ledgerflow.model.ids import InstanceId
from ledgerflow.model.instance import TERMINAL_STATUSES, InstanceStatus
from ledgerflow.operators.service import (
    ACTION_KINDS,
    AuditQuery,
    Operations,
    RepairKind,
    RepairRequest,
    local_actor,
)
from ledgerflow.operators.shapes import listing

F = TypeVar("F", bound=Callable[..., Any])


def _repair_options(command: F) -> F:
    """The options every repair command takes (applied bottom-up, so listed in reverse)."""
    for option in reversed(
        [
            click.option("--reason", required=True, help="Why; recorded in the audit log."),
            authority_option,
            click.option("--dry-run", is_flag=True, help="Print the exact plan; change nothing."),
            acting_options,
            json_option,
        ]
    ):
        command = option(command)
    return command


def _run(request_fields: dict[str, Any], options: dict[str, Any]) -> None:
    """Plan or apply the repair: as local:ACCOUNT under the authority file, or with a token
    through the API as its principal (then its role decides, and the file is not read)."""
    api = api_of(db=options["db"], token=options["token"], url=options["url"])
    request = RepairRequest(actor=local_actor(), reason=options["reason"], **request_fields)
    if api is not None:
        route = f"/v1/instances/{quoted(request.instance_id)}/repairs"
        with api:
            body = api.send("POST", f"{route}/plan" if options["dry_run"] else route,
                            _repair_body(request))  # fmt: skip
    else:
        authority = authority_of(options["authority_file"])
        with Operations(options["db"], authority=authority) as operations:
            result = operations.plan(request) if options["dry_run"] else operations.apply(request)
        body = {
            "outcome": result.outcome,
            "audit_id": result.audit_id,
            "message": result.message,
            "plan": result.plan.describe(),
            "changes": result.plan.to_json(),
        }
    _print_result(body, as_json=options["as_json"])


def _repair_body(request: RepairRequest) -> dict[str, Any]:
    """A repair as the API's repair routes take it (``docs/http-api.md``)."""
    body = {
        "kind": request.kind.value,
        "reason": request.reason,
        "seq": request.seq,
        "applied": request.applied,
        "evidence": request.evidence,
        "result": request.result,
        "status": request.status.value if request.status else None,
        "compensate": request.compensate,
        "resume": request.resume,
    }
    # A substitute result may be null itself: skip-step sends it whatever it is.
    keep = {"result"} if request.kind is RepairKind.SKIP_STEP else set()
    return {k: v for k, v in body.items() if v is not None or k in keep}


def _print_result(body: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        echo_json({k: body[k] for k in ("outcome", "audit_id", "message", "plan", "changes")})
        return
    out = console()
    for line in body["plan"]:
        out.print(cell(f"  {line}"))
    out.print(cell(body["message"]))


# A compensation's position is negative (-3 undoes step 3): click would read it as an option.
NEGATIVE_POSITIONS = {"ignore_unknown_options": True}


@click.group()
def repair() -> None:
    """Audited repairs of stuck instances: each needs a grant of the authority file
    (LEDGERFLOW_AUTHORITY or --authority), or with --token a token's role (docs/operators.md)."""


@repair.command("resolve-effect")
@click.argument("instance_id", metavar="ID")
@click.argument("seq", type=int)
@click.option("--applied/--not-applied", default=None, help="What the evidence proves.")
@click.option(
    "--evidence", required=True, help="The participant's own record, as JSON (@FILE or - reads it)."
)
@click.option("--resume", is_flag=True, help="Also resume the instance if it is parked.")
@_repair_options
def resolve_effect(
    instance_id: str, seq: int, applied: bool | None, evidence: str, resume: bool, **options: Any
) -> None:
    """Settle the effect at step SEQ (UNKNOWN, or in flight with no live owner) with evidence."""
    if applied is None:
        raise click.UsageError("say what the evidence proves: --applied or --not-applied")
    fields = {"applied": applied, "evidence": json_option_value(evidence, "--evidence")}
    _run(_target(RepairKind.RESOLVE_EFFECT, instance_id, seq, resume=resume, **fields), options)


@repair.command("retry-step")
@click.argument("instance_id", metavar="ID")
@click.argument("seq", type=int)
@_repair_options
def retry_step(instance_id: str, seq: int, **options: Any) -> None:
    """Give the FAILED step SEQ one more attempt under its original identity, due now."""
    _run(_target(RepairKind.RETRY_STEP, instance_id, seq), options)


@repair.command("skip-step")
@click.argument("instance_id", metavar="ID")
@click.argument("seq", type=int)
@click.option(
    "--result",
    "result_text",
    required=True,
    help="The substitute result, as JSON (@FILE or - reads it).",
)
@_repair_options
def skip_step(instance_id: str, seq: int, result_text: str, **options: Any) -> None:
    """Complete step SEQ with a substitute result; the workflow receives it on replay."""
    result = json_option_value(result_text, "--result")
    _run(_target(RepairKind.SKIP_STEP, instance_id, seq, result=result), options)


@repair.command("run-compensation", context_settings=NEGATIVE_POSITIONS)
@click.argument("instance_id", metavar="ID")
@click.argument("seq", type=int)
@_repair_options
def run_compensation(instance_id: str, seq: int, **options: Any) -> None:
    """Make the compensation at SEQ (negative) due again under its own key."""
    _run(_target(RepairKind.RUN_COMPENSATION, instance_id, seq), options)


@repair.command("skip-compensation", context_settings=NEGATIVE_POSITIONS)
@click.argument("instance_id", metavar="ID")
@click.argument("seq", type=int)
@click.option(
    "--evidence", required=True, help="How it was settled, as JSON (@FILE or - reads it)."
)
@_repair_options
def skip_compensation(instance_id: str, seq: int, evidence: str, **options: Any) -> None:
    """Mark the PLANNED or FAILED compensation at SEQ as settled (SATISFIED) with evidence."""
    value = json_option_value(evidence, "--evidence")
    _run(_target(RepairKind.SKIP_COMPENSATION, instance_id, seq, evidence=value), options)


@repair.command("resume")
@click.argument("instance_id", metavar="ID")
@_repair_options
def resume(instance_id: str, **options: Any) -> None:
    """Bring a parked instance back to the state it was parked from."""
    _run(_target(RepairKind.RESUME, instance_id, None), options)


@repair.command("force")
@click.argument("instance_id", metavar="ID")
@click.argument(
    "status", type=click.Choice(sorted(s.value for s in TERMINAL_STATUSES), case_sensitive=False)
)
@click.option(
    "--result",
    "result_text",
    help="The result (SUCCEEDED, CANCELLED), as JSON (@FILE or - reads it).",
)
@_repair_options
def force(instance_id: str, status: str, result_text: str | None, **options: Any) -> None:
    """End the instance in STATUS, if the state machine and the ledger allow it from here."""
    result = json_option_value(result_text, "--result")
    target = InstanceStatus(status.upper())
    fields = _target(RepairKind.FORCE_TERMINAL, instance_id, None, status=target, result=result)
    _run(fields, options)


@repair.command("cancel")
@click.argument("instance_id", metavar="ID")
@click.option(
    "--compensate/--no-compensate", default=True, show_default=True, help="Undo what was done."
)
@_repair_options
def cancel(instance_id: str, compensate: bool, **options: Any) -> None:
    """Request cancellation (a parked instance is resumed to honour it), audited."""
    _run(_target(RepairKind.CANCEL, instance_id, None, compensate=compensate), options)


def _target(kind: RepairKind, instance_id: str, seq: int | None, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "instance_id": InstanceId(instance_id), "seq": seq, **extra}


# -- audit -------------------------------------------------------------------------------------


def _since(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise click.BadParameter(
            "expected seconds since the epoch or an ISO time", param_hint="'--since'"
        ) from None


@click.command()
@click.option("--instance", "instance_id", help="Only records of this instance.")
@click.option("--actor", help="Only records of this actor.")
@click.option(
    "--kind",
    type=click.Choice([k.value for k in RepairKind] + list(ACTION_KINDS)),
    help="Only this kind (a repair, or start, cancel, signal, complete-effect, token-...).",
)
@click.option("--since", help="Only records at or after this time (epoch seconds or ISO).")
@limit_option(
    default=limits.AUDIT_LIMIT_DEFAULT, text="At most this many (the newest), shown oldest first."
)
@db_option
@json_option
def audit(
    instance_id: str | None,
    actor: str | None,
    kind: str | None,
    since: str | None,
    limit: int,
    db: str,
    as_json: bool,
) -> None:
    """The audit log: repairs, and every start, cancel, signal, callback and token change made
    through the service; applied, repeated (no-op) and refused, oldest first."""
    with Operations(db) as operations:
        records = operations.audit(
            AuditQuery(
                instance_id=InstanceId(instance_id) if instance_id else None,
                actor=actor,
                kind=kind,
                since=_since(since),
                limit=limit,
            )
        )
    if as_json:
        echo_json(listing([audit_json(record) for record in records]))
        return
    if not records:
        console().print("no audit records")
        return
    print_table(console(), audit_table(records))


def register(group: click.Group) -> None:
    group.add_command(repair)
    group.add_command(audit)
