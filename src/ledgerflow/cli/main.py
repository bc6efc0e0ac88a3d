"""The ``ledgerflow`` entry point: groups the commands and maps errors to exit codes.

Exit codes: 0 success, 1 a Ledgerflow error (printed with its code), 2 bad usage.
"""

from __future__ import annotations

import sys

import click

from ledgerflow.cli.attention import register as register_attention
from ledgerflow.cli.demo import register as register_demo
from ledgerflow.cli.instances import register as register_instances
from ledgerflow.cli.reconcile import register as register_reconcile
from ledgerflow.cli.repairs import register as register_repairs
from ledgerflow.cli.serve import register as register_serve
from ledgerflow.cli.signals import register as register_signals
from ledgerflow.cli.verify import register as register_verify
from ledgerflow.cli.worker import worker
from ledgerflow.errors import LedgerflowError


@click.group()
@click.version_option(package_name="ledgerflow")
def cli() -> None:
    """Ledgerflow: durable workflows whose every step and effect is on a ledger."""


cli.add_command(worker)
register_instances(cli)
register_demo(cli)
register_verify(cli)
register_serve(cli)
register_signals(cli)
register_repairs(cli)
register_attention(cli)
register_reconcile(cli)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except LedgerflowError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
