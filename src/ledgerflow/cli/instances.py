"""``ledgerflow start|result|cancel|list|show``: start instances and read their ledgers
(internal).

This module owns the operator's view of instances from the command line. Only ``start`` needs
the user's registry (to pin the definition version and its fingerprint); every command goes
through the operators' service (:class:`~ledgerflow.operators.service.Operations`), and all but
``start`` read nothing but the store, so they work on a machine that does not have the
workflow code. ``start`` and ``cancel`` change something, as ``local:ACCOUNT`` (``cancel``
under the authority file, like a repair) or, with ``--token``, through the HTTP API as the
token's principal (:mod:`ledgerflow.cli.api_client`); both are audited.

Every command prints rich tables for people (:mod:`ledgerflow.cli.tables`) and, with
``--json``, one JSON document for scripts (shapes: :mod:`ledgerflow.operators.shapes`). Errors
are the engine's own (``[LFxxx]`` codes, exit 1), except input the command itself cannot read,
which is a usage error (exit 2). ``start`` creates and migrates the journal like a worker; the
others open it as it is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import click
from rich.text import Text

from ledgerflow import InstanceStatus, limits
from ledgerflow.cli.api_client import ApiClient, quoted
from ledgerflow.cli.json_input import json_option_value
from ledgerflow.cli.loading import load_registry
from ledgerflow.cli.options import (
    acting_options,
    api_of,
    authority_of,
    authority_option,
    db_option,
    echo_json,
    json_option,
    limit_option,
    tenant_of,
)
from ledgerflow.cli.render import cell, console, inert, print_table
from ledgerflow.cli.tables import (
    attempt_errors_table,
    audit_json,
    audit_table,
    children_table,
    effects_table,
    header_table,
    inbox_table,
    instances_table,
    runs_table,
    steps_table,
    timeline_table,
    values_table,
)
from ledgerflow.errors import ResultTimeoutError
from ledgerflow.model.instance import TERMINAL_STATUSES
from ledgerflow.operators.commands import StartExtras
from ledgerflow.operators.service import InstanceQuery, Operations, local_actor
from ledgerflow.operators.shapes import decoded, detail_json, page_json, record_json

LIST_LIMIT_DEFAULT = 50
# What `result` and `start --wait` say when nothing ran the instance: a person at the command
# line runs a worker with a command, not with the engine's Python.
NO_WORKER_HINT = (
    "no worker is running (a start only records the instance; a worker runs it): run one with "
    "`ledgerflow worker MODULE:REGISTRY --db URL`, in another terminal or as a service"
)


# -- start -------------------------------------------------------------------------------------


@click.command()
@click.argument("target", metavar="MODULE:OBJECT")
@click.argument("workflow")
@click.option("--key", required=True, help="Business key: starting it again returns the same.")
@click.option(
    "--input",
    "input_text",
    help="Workflow input as JSON, @FILE to read it from a file, or - for stdin (default: null).",
)
@click.option("--version", type=int, help="Definition version (default: the newest).")
@click.option("--tenant", help="Tenant (default: 'default', or the token's own).")
@click.option(
    "--start-at",
    type=click.FloatRange(min=0),
    help="Run no step before this time (epoch seconds): SCHEDULED until then.",
)
@click.option(
    "--start-in",
    type=click.FloatRange(min=0),
    help="Run no step before this many SECONDS from now: SCHEDULED until then.",
)
@click.option(
    "--debounce",
    "debounce_seconds",
    type=click.FloatRange(min=0, min_open=True),
    help="Debounce starts of the key: due once no other start came for SECONDS; a start "
    "while it is pending replaces its input.",
)
@click.option(
    "--debounce-max",
    "debounce_max_seconds",
    type=click.FloatRange(min=0, min_open=True),
    help="A debounced start is due at the latest SECONDS after the window's first start "
    "(default: 10 windows).",
)
@click.option(
    "--if-running",
    type=click.Choice(["return", "fail"]),
    default="return",
    show_default=True,
    help="When the key's instance is in flight: return it, or refuse.",
)
@click.option(
    "--if-ended",
    type=click.Choice(["return", "new_run", "new_run_if_failed", "fail"]),
    default="return",
    show_default=True,
    help="When the key's instance has ended: return it, start its next run, or refuse.",
)
@click.option("--signal", help="Deliver this event in the start's own transaction.")
@click.option("--signal-event-id", help="The --signal event's id (required with --signal).")
@click.option(
    "--signal-wakes", is_flag=True, help="The --signal ends a delayed start's delay (due now)."
)
@click.option(
    "--signal-payload",
    "signal_payload_text",
    help="The --signal event's payload as JSON, or @FILE (default: null).",
)
@click.option(
    "--wait",
    "wait_seconds",
    type=click.FloatRange(min=0),
    help="Wait up to SECONDS for the instance to end and print its result.",
)
@acting_options
@json_option
def start(
    target: str,
    workflow: str,
    key: str,
    input_text: str | None,
    version: int | None,
    tenant: str | None,
    wait_seconds: float | None,
    db: str | None,
    token: str | None,
    url: str | None,
    as_json: bool,
    **asked: Any,
) -> None:
    """Start WORKFLOW of MODULE:OBJECT for a business key, or find the one it already started.

    A repeated start with the same key, input and version returns the existing instance; the
    same key with another input or version is refused (LF311), and so is a used key whose
    policy says so (--if-running, --if-ended); --if-ended new_run starts the ended instance's
    next run. --start-at / --start-in schedule it; --debounce SECONDS debounces the key's
    starts (a start while its instance is pending replaces the input); --signal delivers an
    event with the start, in one transaction. The start is on the audit log, against
    local:ACCOUNT; with --token it is the server's (its registry pins the definition, so
    MODULE:OBJECT is not imported) and the token's principal starts it, in its tenant.
    """
    value = json_option_value(input_text, "--input")
    options = _start_options(asked)
    api = api_of(db=db, token=token, url=url)
    if api is not None:
        with api:
            _start_over_api(
                api, workflow, key, value, version, tenant, wait_seconds, as_json, options
            )
        return
    assert db is not None
    registry = load_registry(target)
    # The journal is created and migrated like a worker's (migrate=None: as the URL says).
    with Operations(db, registry=registry, migrate=None, no_worker_hint=NO_WORKER_HINT) as engine:
        started = engine.start(
            workflow,
            key=key,
            input=value,
            version=version,
            tenant=tenant_of(tenant),
            actor=local_actor(),
            **options,
        )
        instance = started.instance
        summary = _started_summary(
            record_json(instance),
            created=started.created,
            debounced=started.debounced,
            as_json=as_json,
        )
        if wait_seconds is None:
            if as_json:
                echo_json(summary)
            return
        # Printed before waiting, so the instance id is known even if the wait times out.
        final = engine.wait(instance.instance_id, timeout=wait_seconds)
        _finish(
            summary,
            record_json(final),
            as_json=as_json,
            # A run that ended otherwise is an error of the command: the engine says how.
            fail=lambda: engine.result(instance.instance_id, timeout=0),
        )


def _start_options(asked: dict[str, Any]) -> StartExtras:
    """The start options as the command line gives them (docs/programming-model.md)."""
    return {
        "start_at": asked["start_at"],
        "start_in": asked["start_in"],
        "if_running": asked["if_running"],
        "if_ended": asked["if_ended"],
        "signal": asked["signal"],
        "signal_event_id": asked["signal_event_id"],
        "signal_payload": json_option_value(asked["signal_payload_text"], "--signal-payload"),
        "signal_wakes": asked["signal_wakes"],
        "debounce_seconds": asked["debounce_seconds"],
        "debounce_max_seconds": asked["debounce_max_seconds"],
    }


def _start_over_api(
    api: ApiClient,
    workflow: str,
    key: str,
    value: Any,
    version: int | None,
    tenant: str | None,
    wait_seconds: float | None,
    as_json: bool,
    options: StartExtras,
) -> None:
    request = {"workflow_name": workflow, "business_key": key, "input": value, "version": version}
    # Only the options asked for: a server of an older release takes the request it knows.
    defaults: dict[str, Any] = {"if_running": "return", "if_ended": "return", "signal_wakes": False}
    request.update(
        {k: v for k, v in options.items() if v is not None and (k, v) not in defaults.items()}
    )
    if tenant is not None:
        request["tenant"] = tenant_of(tenant)
    answer = api.send("POST", "/v1/instances", request)
    instance = answer["instance"]
    summary = _started_summary(
        instance,
        created=bool(answer["created"]),
        debounced=bool(answer.get("debounced")),
        as_json=as_json,
    )
    if wait_seconds is None:
        if as_json:
            echo_json(summary)
        return
    path = f"/v1/instances/{quoted(instance['instance_id'])}"
    final = _ended_over_api(api, path, timeout=wait_seconds)
    _finish(summary, final, as_json=as_json, fail=lambda: api.send("GET", f"{path}/result"))


def _ended_over_api(api: ApiClient, path: str, *, timeout: float) -> dict[str, Any]:
    """The instance once it has ended (polled through the API), or ResultTimeoutError."""
    deadline = time.monotonic() + timeout
    pause = limits.CLI_API_POLL_SECONDS_MAX / 20
    while True:
        instance: dict[str, Any] = api.send("GET", path)["instance"]
        if instance["status"] in _ENDED:
            return instance
        if time.monotonic() >= deadline:
            raise ResultTimeoutError(
                f"instance is still {instance['status']} after {timeout}s",
                instance_id=instance["instance_id"],
            )
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, limits.CLI_API_POLL_SECONDS_MAX)


_ENDED = frozenset(s.value for s in TERMINAL_STATUSES)


def _started_summary(
    instance: dict[str, Any], *, created: bool, debounced: bool, as_json: bool
) -> dict[str, Any]:
    """What ``start`` says of the instance (printed now, unless the answer is JSON), from
    the instance as a record's JSON (the service's or the API's)."""
    if not as_json:
        verb = "created" if created else "already existed"
        verb = "debounced into the pending start" if debounced else verb
        console().print(
            Text.assemble(
                (instance["instance_id"], "bold"),
                cell(
                    f"  {instance['workflow_name']}@{instance['workflow_version']}"
                    f"  key {instance['business_key']!r}: {verb} ({instance['status']})"
                ),
            )
        )
    return {
        "instance_id": instance["instance_id"],
        "created": created,
        "debounced": debounced,
        "workflow": instance["workflow_name"],
        "version": instance["workflow_version"],
        "business_key": instance["business_key"],
        "tenant": instance["tenant"],
        "status": instance["status"],
    }


def _finish(
    summary: dict[str, Any], final: dict[str, Any], *, as_json: bool, fail: Callable[[], object]
) -> None:
    """Say how a waited-for instance ended; ``fail`` raises the error of an ending without a
    result (the command's failure)."""
    succeeded = final["status"] == InstanceStatus.SUCCEEDED.value
    summary["status"] = final["status"]
    if succeeded:
        summary["result"] = final["result"]
    else:
        summary["reason_code"] = final["reason_code"]
        summary["reason"] = final["reason"]
    if as_json:
        # One document: the summary says how it ended; an ending without a result is
        # still a failure of the command.
        echo_json(summary)
        if not succeeded:
            raise SystemExit(1)
        return
    if succeeded:
        console().print(Text(json.dumps(summary["result"], indent=2, sort_keys=True)))
        return
    fail()


# -- result ------------------------------------------------------------------------------------


@click.command()
@click.argument("instance_id", metavar="ID")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to wait for the instance to end (0: answer from the store now).",
)
@db_option
@json_option
def result(instance_id: str, timeout: float, db: str, as_json: bool) -> None:
    """Print the result of instance ID (exit 1 if it ended without one or is not done)."""
    with Operations(db, no_worker_hint=NO_WORKER_HINT) as operations:
        record = operations.wait(instance_id, timeout=timeout)
        if record.status is InstanceStatus.SUCCEEDED:
            value = decoded(record.result)
            if as_json:
                echo_json(
                    {
                        "instance_id": record.instance_id,
                        "status": record.status.value,
                        "result": value,
                    }
                )
            else:
                console().print(Text(json.dumps(value, indent=2, sort_keys=True)))
            return
        operations.result(instance_id, timeout=0)


# -- cancel ------------------------------------------------------------------------------------


@click.command()
@click.argument("instance_id", metavar="ID")
@click.option("--reason", required=True, help="Why; recorded with the request.")
@click.option(
    "--compensate/--no-compensate",
    default=True,
    show_default=True,
    help="Undo the confirmed effects (unless a forward-recovery-only one forbids it).",
)
@authority_option
@acting_options
@json_option
def cancel(
    instance_id: str,
    reason: str,
    compensate: bool,
    authority_file: str | None,
    db: str | None,
    token: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Ask for instance ID to be cancelled (durable; repeating it changes nothing).

    The instance stops before its next step, finishes what was started, compensates if asked,
    and ends CANCELLED listing the effects that stay applied. Like a repair, it needs a grant
    that allows ``cancel`` held by local:ACCOUNT in the authority file, or with --token a
    token whose role is operator or above; every try is on the audit log.
    """
    api = api_of(db=db, token=token, url=url)
    if api is not None:
        with api:
            record = api.send(
                "POST",
                f"/v1/instances/{quoted(instance_id)}/cancel",
                {"reason": reason, "compensate": compensate},
            )
    else:
        assert db is not None
        with Operations(db, authority=authority_of(authority_file)) as operations:
            done = operations.cancel(
                instance_id, reason=reason, compensate=compensate, actor=local_actor()
            )
        record = record_json(done)
    if as_json:
        echo_json(
            {
                "instance_id": record["instance_id"],
                "status": record["status"],
                "cancel_requested_at": record["cancel_requested_at"],
                "cancel_reason": record["cancel_reason"],
                "compensate": record["cancel_compensate"],
            }
        )
        return
    click.echo(
        inert(
            f"cancel requested for {record['instance_id']} ({record['status']}): "
            f"{record['cancel_reason']}"
        )
    )


# -- list --------------------------------------------------------------------------------------


@click.command("list")
@click.option(
    "--status",
    type=click.Choice([s.value for s in InstanceStatus], case_sensitive=False),
    help="Only instances in this status.",
)
@click.option("--workflow", help="Only instances of this workflow.")
@click.option("--tenant", help="Only instances of this tenant.")
@limit_option(
    default=LIST_LIMIT_DEFAULT,
    text="At most this many, newest first (a page: --cursor gives the next).",
    maximum=limits.PAGE_SIZE_MAX,
)
@click.option(
    "--cursor",
    help="Where the previous page ended: the next_cursor it printed.",
)
@db_option
@json_option
def list_(
    status: str | None,
    workflow: str | None,
    tenant: str | None,
    limit: int,
    cursor: str | None,
    db: str,
    as_json: bool,
) -> None:
    """List instances, newest first, a page at a time."""
    query = InstanceQuery(
        status=status.upper() if status else None,
        workflow_name=workflow,
        tenant=tenant_of(tenant),
        limit=limit,
    )
    with Operations(db) as operations:
        page = operations.page(query, cursor=cursor)
    if as_json:
        echo_json(page_json(page, record_json))
        return
    out = console()
    if not page.items:
        out.print("no instances")
        return
    print_table(out, instances_table(page.items))
    if page.next_cursor:
        out.print(Text(f"more: --cursor {page.next_cursor}"))


# -- show --------------------------------------------------------------------------------------


@click.command()
@click.argument("instance_id", metavar="ID")
@db_option
@json_option
def show(instance_id: str, db: str, as_json: bool) -> None:
    """Show instance ID: its header, step and effect ledgers, inbox, timeline, open attention
    flags and the audit records of its repairs."""
    with Operations(db) as operations:
        report = operations.show(instance_id)
    detail, audit, flags = report.detail, report.audit, report.flags
    if as_json:
        echo_json(
            {
                **detail_json(detail),
                "audit": [audit_json(a) for a in audit],
                "flags": [record_json(f) for f in flags],
            }
        )
        return
    out = console()
    out.print(header_table(detail.instance))
    out.print()
    if detail.runs:
        print_table(out, runs_table(detail.runs, open_run=detail.instance.run))
    if detail.steps:
        print_table(out, steps_table(detail.steps))
    else:
        out.print(Text("steps: none yet"))
    if detail.effects:
        print_table(out, effects_table(detail.effects))
    else:
        out.print(Text("effects: none"))
    failed = attempt_errors_table(detail.steps, detail.effects)
    if failed is not None:
        print_table(out, failed)
    for step in detail.steps:
        if step.error_traceback:
            out.print(Text(f"traceback of step {step.seq} ({step.name}), its latest failure:"))
            out.print(Text(step.error_traceback.rstrip()))
            out.print()
    if detail.inbox:
        print_table(out, inbox_table(detail.inbox))
    if detail.children:
        print_table(out, children_table(detail.children))
    if detail.values:
        print_table(out, values_table(detail.values))
    print_table(out, timeline_table(detail.timeline))
    if flags:
        out.print(cell("open flags: " + "; ".join(f"{f.reason_code}: {f.evidence}" for f in flags)))
    if audit:
        # Not only repairs: every change asked for from outside is on it (start, signal,
        # cancel, callbacks, version moves...).
        title = "audit log of this instance (every change asked for from outside)"
        print_table(out, audit_table(audit, title=title))


def register(group: click.Group) -> None:
    for command in (start, result, cancel, list_, show):
        group.add_command(command)
