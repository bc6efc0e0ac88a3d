"""The ``ledgerflow`` entry point: groups the commands and maps errors to exit codes.

Exit codes: 0 success, 1 a Ledgerflow error (printed with its code), 2 bad usage.
"""

from __future__ import annotations

import sys

import click

from ledgerflow.cli.worker import worker
from ledgerflow.errors import LedgerflowError


@click.group()
@click.version_option(package_name="ledgerflow")
def cli() -> None:
    """Ledgerflow: durable workflows whose every step and effect is on a ledger."""


cli.add_command(worker)

try:  # The other command groups register themselves when present.
    from ledgerflow.cli.instances import register as _register_instances

    _register_instances(cli)
except ImportError:  # pragma: no cover - only while a group is being written
    pass
try:
    from ledgerflow.cli.demo import register as _register_demo

    _register_demo(cli)
except ImportError:  # pragma: no cover
    pass


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
