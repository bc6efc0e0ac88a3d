"""Finding the user's registry from ``MODULE:OBJECT`` and the store from flags (internal)."""

from __future__ import annotations

import importlib
import os
import sys

import click

from ledgerflow.model.definition import Registry

DB_ENVIRONMENT_VARIABLE = "LEDGERFLOW_DB"


def load_registry(target: str) -> Registry:
    """Import ``package.module:object`` and check that it is a :class:`Registry`."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"expected MODULE:OBJECT, got {target!r}")
    if os.getcwd() not in sys.path:
        # Like `python -m`, let a module in the current folder be found.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}") from None
    registry = getattr(module, attribute, None)
    if not isinstance(registry, Registry):
        raise click.BadParameter(
            f"{target} is {type(registry).__name__}, not a ledgerflow.Registry"
        )
    return registry


db_option = click.option(
    "--db",
    "db",
    envvar=DB_ENVIRONMENT_VARIABLE,
    required=True,
    help=f"Store URL, e.g. sqlite:///orders.db (or set {DB_ENVIRONMENT_VARIABLE}).",
)
