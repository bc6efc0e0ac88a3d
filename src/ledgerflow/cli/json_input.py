"""JSON a command takes as an option: literal, from a file, or from stdin (internal).

``--input``, ``--payload``, ``--evidence`` and ``--result`` take JSON text; ``@PATH`` reads it
from a file and ``-`` from stdin, for inputs too large for a command line (JSON text never
starts with ``@``, and ``-`` alone is not JSON, so neither is ambiguous). Reading is bounded by
``limits.JSON_INPUT_BYTES_MAX`` and nesting by ``limits.JSON_DEPTH_MAX``; anything unreadable
is a usage error naming the option.
"""

from __future__ import annotations

import sys
from typing import IO, Any

import click

from ledgerflow import limits
from ledgerflow.errors import PayloadError
from ledgerflow.model import json_text

STDIN = "-"


def json_option_value(text: str | None, option: str) -> Any:
    """The JSON value an option was given (None when it was not given)."""
    if text is None:
        return None
    source = text
    if text == STDIN:
        source = _bounded(sys.stdin, option, "stdin")
    elif text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as file:
                source = _bounded(file, option, path)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {path}: {exc.strerror}", param_hint=f"'{option}'"
            ) from None
        except UnicodeDecodeError:
            raise click.BadParameter(
                f"{path} is not UTF-8 text", param_hint=f"'{option}'"
            ) from None
    try:
        return json_text.loads(source, what="the value")
    except PayloadError as exc:
        raise click.BadParameter(exc.message, param_hint=f"'{option}'") from None


def _bounded(stream: IO[str], option: str, name: str) -> str:
    text = stream.read(limits.JSON_INPUT_BYTES_MAX + 1)
    if len(text) > limits.JSON_INPUT_BYTES_MAX:
        raise click.BadParameter(
            f"{name} holds more than {limits.JSON_INPUT_BYTES_MAX} characters",
            param_hint=f"'{option}'",
        )
    return text
