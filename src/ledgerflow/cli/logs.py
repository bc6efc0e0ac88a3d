"""How the long-running commands log: ``--log-format json|text`` (internal).

``worker``, ``serve`` and ``demo`` take ``--log-format`` (or ``LEDGERFLOW_LOG_FORMAT``). Both
formats carry the same record: the time (UTC, ISO 8601), the level, the logger, the message,
and the identity fields the line is about (tenant, workflow, version, instance, run, step,
effect, key, worker, generation: see :data:`ledgerflow.runtime.journal_log.IDENTITY_FIELDS`)
as fields of their own, so a log pipeline can select every line of one instance without
parsing messages. ``json`` writes one JSON object per line; ``text`` writes the message with
the fields after it as ``name=value``. An exception's traceback is kept to its last
``TRACEBACK_CHARS_MAX`` characters.

Payloads are never logged (the runtime's lines name steps, effects and errors, not inputs or
evidence), and a database URL in a message is redacted where it is written.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from ledgerflow import limits
from ledgerflow.runtime.journal_log import IDENTITY_FIELDS

LOG_FORMAT_VARIABLE = "LEDGERFLOW_LOG_FORMAT"
FORMATS = ("text", "json")

F = TypeVar("F", bound=Callable[..., Any])


def log_format_option(command: F) -> F:
    """``--log-format``, also read from ``LEDGERFLOW_LOG_FORMAT``."""
    return click.option(
        "--log-format",
        type=click.Choice(FORMATS),
        default="text",
        show_default=True,
        envvar=LOG_FORMAT_VARIABLE,
        show_envvar=True,
        help="Log lines as text or as one JSON object per line; each carries its level, UTC "
        "time and the ids it is about (docs/observability.md).",
    )(command)


def _time(record: logging.LogRecord) -> str:
    at = datetime.fromtimestamp(record.created, tz=UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {
        name: getattr(record, name)
        for name in IDENTITY_FIELDS
        if getattr(record, name, None) is not None
    }


def _traceback(formatter: logging.Formatter, record: logging.LogRecord) -> str | None:
    if not record.exc_info:
        return None
    text = formatter.formatException(record.exc_info)
    if len(text) > limits.TRACEBACK_CHARS_MAX:
        text = "...\n" + text[-(limits.TRACEBACK_CHARS_MAX - 4) :]
    return text


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the ids, and the error."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line["error"] = f"{type(error).__name__}: {error}"
        trace = _traceback(self, record)
        if trace is not None:
            line["traceback"] = trace
        return json.dumps(line, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER MESSAGE name=value...``, then the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        text = f"{_time(record)} {record.levelname} {record.name} {record.getMessage()}"
        text = f"{text} {fields}" if fields else text
        trace = _traceback(self, record)
        return f"{text}\n{trace}" if trace else text


def configure_logging(log_format: str) -> None:
    """Ledgerflow's own decisions at INFO, libraries only when they warn, on stderr in
    ``log_format``."""
    root = logging.getLogger()
    # As logging.basicConfig: a process whose logging is set up already (an application that
    # runs the command, a test's capture) keeps its handlers.
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
    logging.getLogger("ledgerflow").setLevel(logging.INFO)
