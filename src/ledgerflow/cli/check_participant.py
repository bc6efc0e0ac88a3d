"""``ledgerflow check-participant``: prove, or refute, what a participant's declaration claims.

The claims and how each is put are in :mod:`ledgerflow.participant.check`. Exit codes: 0 when
every claimed promise is proven, 3 when one is refuted (so a CI job can tell a broken promise
from a check that could not run: 1 for a Ledgerflow error such as an unreachable participant,
2 for bad usage).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import click
from rich.table import Table

from ledgerflow.cli.json_input import json_option_value
from ledgerflow.cli.loading import load_registry
from ledgerflow.cli.options import echo_json
from ledgerflow.cli.render import cell, console, lines_cell, print_table
from ledgerflow.errors import CommandLineError
from ledgerflow.model.definition import Participant
from ledgerflow.participant.check import (
    TIMEOUT_SECONDS_DEFAULT,
    ClaimStatus,
    Clock,
    HttpTransport,
    Report,
    Transport,
    check_participant,
    started_clock,
)
from ledgerflow.participant.check_broker import broker_transport
from ledgerflow.participant.nats import NatsParticipant
from ledgerflow.participant.rabbitmq import RabbitMQParticipant
from ledgerflow.participant.remote import RemoteParticipant

REFUTED_EXIT = 3
_STYLES = {
    ClaimStatus.PROVEN: "green",
    ClaimStatus.REFUTED: "bold red",
    ClaimStatus.NOT_CLAIMED: "dim",
}


def _participant(target: str, name: str) -> Participant:
    registry = load_registry(target)
    found = registry.participants.get(name)
    if found is None:
        known = ", ".join(sorted(registry.participants)) or "none"
        raise CommandLineError(f"{target} declares no participant {name!r} (it declares: {known})")
    return found


def _operation(participant: Participant, chosen: str | None) -> str:
    originals = [d.operation for d in participant.effects.values() if not d.is_compensation]
    if chosen is None:
        if not originals:
            raise CommandLineError(f"participant {participant.name} declares no effect to check")
        return originals[0]
    if chosen not in originals:
        raise CommandLineError(
            f"participant {participant.name} declares no effect {chosen!r} "
            f"(it declares: {', '.join(originals) or 'none'})"
        )
    return chosen


def _transport(
    participant: Participant,
    url: str | None,
    broker: str | None,
    *,
    timeout: float,
    clock: Clock,
) -> Transport:
    """HTTP at ``--url`` (default: the declared base_url), or the declared broker route at
    ``--broker`` (default: the declared server)."""
    if url is not None and broker is not None:
        raise CommandLineError("pass --url (over HTTP) or --broker (over a broker), not both")
    over_broker = isinstance(participant, RabbitMQParticipant | NatsParticipant)
    if broker is not None or (url is None and over_broker):
        if not isinstance(participant, RabbitMQParticipant | NatsParticipant):
            raise CommandLineError(
                f"participant {participant.name} is not declared over a broker "
                "(rabbitmq_participant or nats_participant): its route is what --broker uses"
            )
        try:
            return broker_transport(participant, broker, timeout_seconds=timeout, clock=clock)
        except ValueError as error:
            raise CommandLineError(f"--broker: {error}") from None
    if url is not None:
        if not url.startswith(("http://", "https://")):
            raise CommandLineError(f"--url takes an http:// or https:// URL, not {url!r}")
    elif isinstance(participant, RemoteParticipant):
        url = participant.base_url
    else:
        raise CommandLineError(
            f"participant {participant.name} is not declared over HTTP (remote_participant): "
            "pass --url with its service's address"
        )
    return HttpTransport(url, participant.name, timeout_seconds=timeout, clock=clock)


def _evidence_lines(record: dict[str, Any], run: str) -> list[str]:
    """Each request and its answer, the run's id shortened to ``<run>`` (the title names it)."""
    lines = []
    for exchange in record["evidence"]:
        request = exchange["request"]
        # POST or GET over HTTP, PUBLISH over a broker, CALL for a lookup function.
        method = next(name for name in request if name != "body")
        body = request.get("body")
        sent = f"{method} {request[method]}"
        if body is not None:
            sent += f" key={body['key']} attempt={body['attempt']}"
        answer = json.dumps(exchange["answer"], sort_keys=True)
        if len(answer) > 200:
            answer = answer[:197] + "..."
        status = "" if exchange["status"] is None else f"{exchange['status']} "
        lines.append(sent.replace(run, "<run>"))
        lines.append(f"  -> {status}{answer.replace(run, '<run>')}")
    return lines


def _table(report: Report) -> Table:
    record = report.to_record()
    table = Table(
        title=f"participant {report.participant} at {report.target} (run {report.run})",
        title_justify="left",
        show_lines=True,
    )
    table.add_column("claim", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("finding", overflow="fold")
    table.add_column("requests and answers", overflow="fold")
    for claim, shown in zip(report.claims, record["claims"], strict=True):
        status = cell(claim.status.value)
        status.stylize(_STYLES[claim.status])
        table.add_row(
            cell(claim.name),
            status,
            cell(claim.summary.replace(report.run, "<run>")),
            lines_cell(_evidence_lines(shown, report.run)),
        )
    return table


def register(group: click.Group) -> None:
    @group.command("check-participant")
    @click.argument("target", metavar="MODULE:REGISTRY")
    @click.argument("name", metavar="PARTICIPANT")
    @click.option("--url", help="The service's address (default: the declared base_url).")
    @click.option(
        "--broker",
        metavar="URL",
        help="Check over the declared RabbitMQ (amqp://) or NATS (nats://) route, at this "
        "server (default: the declared one). Lookups go through the declared lookup function.",
    )
    @click.option(
        "--operation",
        help="The effect to apply (default: the participant's first declared effect).",
    )
    @click.option(
        "--payload",
        default="{}",
        show_default=True,
        help="The payload each application carries: JSON, @FILE or - for stdin.",
    )
    @click.option(
        "--timeout",
        type=click.FloatRange(min=0.1, max=300),
        default=TIMEOUT_SECONDS_DEFAULT,
        show_default=True,
        help="Seconds to wait for each answer.",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
    def check_participant_command(
        target: str,
        name: str,
        url: str | None,
        broker: str | None,
        operation: str | None,
        payload: str,
        timeout: float,
        as_json: bool,
    ) -> None:
        """Exercise a REAL participant against what its declaration claims.

        Dedupe, lookup before / during / after an application, the fence of a not-applied
        answer, the compensation's own key and the key window against the engine's retry
        horizon: each is reported proven, refuted (with the requests and answers) or not
        claimed. It applies real effects under keys lf-check-<uuid>-...: point it at a test
        instance. Over HTTP (--url) or over the declared broker route (--broker amqp://... or
        nats://...). Exit 0 when every claim is proven, 3 when one is refuted.
        """
        participant = _participant(target, name)
        chosen = _operation(participant, operation)
        body = json_option_value(payload, "--payload")
        clock = started_clock()
        transport = _transport(participant, url, broker, timeout=timeout, clock=clock)
        report = asyncio.run(
            check_participant(participant, transport, operation=chosen, payload=body, clock=clock)
        )
        if as_json:
            echo_json(report.to_record())
        else:
            out = console()
            print_table(out, _table(report))
            counts = report.to_record()["counts"]
            out.print(
                f"{counts['proven']} proven, {counts['refuted']} refuted, "
                f"{counts['not claimed']} not claimed"
            )
        if report.refuted:
            sys.exit(REFUTED_EXIT)
