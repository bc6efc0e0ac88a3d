"""Finding the user's code from ``MODULE:OBJECT`` (internal).

``MODULE`` is a module name (``myapp.workflows``) or a Python file (``./quick2.py``), imported
like ``python -m`` would with the current folder on the path. Whatever goes wrong while
importing the user's module (it is not there, it raises, the attribute is missing or is not a
registry) is one line naming the target and the cause, never a traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import click

from ledgerflow.model.definition import Registry


def import_target(target: str) -> Any:
    """The object ``MODULE:OBJECT`` names, or a usage error saying what went wrong."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(
            f"expected MODULE:OBJECT (e.g. myapp.workflows:registry), got {target!r}",
            param_hint="MODULE:OBJECT",
        )
    module_name = _module_of(module_name)
    if os.getcwd() not in sys.path:
        # Like `python -m`, let a module in the current folder be found.
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint="MODULE:OBJECT"
        ) from None
    except Exception as exc:  # noqa: BLE001 - the user's module raised while importing.
        raise click.BadParameter(
            f"importing {module_name!r} raised {type(exc).__name__}: {exc}",
            param_hint="MODULE:OBJECT",
        ) from None
    if not hasattr(module, attribute):
        raise click.BadParameter(
            f"module {module_name!r} has no attribute {attribute!r}", param_hint="MODULE:OBJECT"
        )
    return getattr(module, attribute)


def _module_of(name: str) -> str:
    """A module name; a path to a Python file is imported from its folder by its stem."""
    if not (name.endswith(".py") or os.sep in name or "/" in name):
        return name
    path = Path(name)
    if path.suffix != ".py" or not path.is_file():
        raise click.BadParameter(
            f"{name!r} is not a Python file; give a module name (myapp.workflows) or the path "
            "of a .py file",
            param_hint="MODULE:OBJECT",
        )
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return path.stem


def load_registry(target: str) -> Registry:
    """Import ``MODULE:OBJECT`` and check that it is a :class:`Registry`."""
    registry = import_target(target)
    if not isinstance(registry, Registry):
        raise click.BadParameter(
            f"{target} is a {type(registry).__name__}, not a ledgerflow.Registry",
            param_hint="MODULE:OBJECT",
        )
    return registry
