"""The ``ledgerflow`` entry point: groups the commands and maps errors to exit codes.

Exit codes: 0 success, 1 a Ledgerflow error, 2 bad usage, 130 interrupted. Every error is
one line on stderr, ``error: [LFnnn] ...``, with any URL's password redacted and any control
character shown as an escape; a command run with ``--json`` prints the error as its JSON
document on stdout instead (``{"error": ..., "code": ..., "message": ...}``), so a script
reading its output always gets JSON.
"""

from __future__ import annotations

import json
import sys

import click

from ledgerflow.cli.attention import register as register_attention
from ledgerflow.cli.check_participant import register as register_check_participant
from ledgerflow.cli.demo import register as register_demo
from ledgerflow.cli.flow import register as register_flow
from ledgerflow.cli.instances import register as register_instances
from ledgerflow.cli.locks import register as register_locks
from ledgerflow.cli.migrate import register as register_migrate
from ledgerflow.cli.reconcile import register as register_reconcile
from ledgerflow.cli.relay import register as register_relay
from ledgerflow.cli.render import inert
from ledgerflow.cli.repairs import register as register_repairs
from ledgerflow.cli.schedules import register as register_schedules
from ledgerflow.cli.serve import register as register_serve
from ledgerflow.cli.signals import register as register_signals
from ledgerflow.cli.tokens import register as register_tokens
from ledgerflow.cli.upgrades import register as register_upgrades
from ledgerflow.cli.verify import register as register_verify
from ledgerflow.cli.versions import register as register_versions
from ledgerflow.cli.worker import worker
from ledgerflow.cli.workers import register as register_workers
from ledgerflow.errors import CommandLineError, LedgerflowError
from ledgerflow.operators.shapes import error_json
from ledgerflow.redaction import redact

USAGE_EXIT = 2
INTERRUPTED_EXIT = 130


@click.group()
@click.version_option(package_name="ledgerflow")
def cli() -> None:
    """Ledgerflow: durable workflows whose every step and effect is on a ledger."""


cli.add_command(worker)
register_instances(cli)
register_migrate(cli)
register_demo(cli)
register_verify(cli)
register_serve(cli)
register_signals(cli)
register_repairs(cli)
register_attention(cli)
register_reconcile(cli)
register_tokens(cli)
register_versions(cli)
register_upgrades(cli)
register_workers(cli)
register_schedules(cli)
register_locks(cli)
register_flow(cli)
register_check_participant(cli)
register_relay(cli)


def _report(error: LedgerflowError, *, as_json: bool) -> None:
    if as_json:
        document = error_json(error)
        document["message"] = redact(document["message"])
        click.echo(json.dumps(document, indent=2, sort_keys=True))
    else:
        click.echo(f"error: {inert(redact(str(error)))}", err=True)


def _usage(exc: click.UsageError) -> CommandLineError:
    """click's usage error as one of Ledgerflow's, in one line (click prints three)."""
    text = exc.format_message()
    if exc.ctx is not None:
        text = f"{text} (see '{exc.ctx.command_path} --help')"
    return CommandLineError(text)


def main() -> None:
    args = sys.argv[1:]
    # Decided from the words typed, not from parsed options: a command line that cannot be
    # parsed still asked for JSON.
    as_json = "--json" in args
    try:
        cli.main(args=args, prog_name="ledgerflow", standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        sys.exit(INTERRUPTED_EXIT)
    except click.UsageError as exc:
        _report(_usage(exc), as_json=as_json)
        sys.exit(USAGE_EXIT)
    except click.ClickException as exc:
        # Not an error of the command line: the demo's verdict, with the log lines that
        # explain it, printed as the demo wrote it.
        exc.show()
        sys.exit(exc.exit_code)
    except CommandLineError as exc:
        _report(exc, as_json=as_json)
        sys.exit(USAGE_EXIT)
    except LedgerflowError as exc:
        _report(exc, as_json=as_json)
        sys.exit(1)
