"""Optional parts of Ledgerflow and the extras that install them (internal).

The core (the engine, SQLite journals, the ``ledgerflow`` command) needs no server libraries.
``pip install 'ledgerflow[postgres]'`` adds psycopg and its pool for PostgreSQL journals;
``pip install 'ledgerflow[http]'`` adds Starlette, uvicorn, FastAPI and Jinja2 for ``ledgerflow
serve``, the demo and its participant service; ``pip install 'ledgerflow[otel]'`` adds the
OpenTelemetry API for traces; ``pip install 'ledgerflow[brokers]'`` adds aio-pika and nats-py
for participants reached through a message broker. Each is imported only where it is used, after
:func:`require_extra` has said, by name, which extra is missing.
"""

from __future__ import annotations

import importlib.util

from ledgerflow.errors import MissingExtraError

# Each extra (as pyproject.toml names it) and the modules it installs.
EXTRAS = {
    "postgres": ("psycopg", "psycopg_pool"),
    "http": ("starlette", "uvicorn", "fastapi", "pydantic", "jinja2", "multipart"),
    "otel": ("opentelemetry",),
    "brokers": ("aio_pika", "nats"),
}


def require_extra(extra: str, *, purpose: str) -> None:
    """Refuse, naming the extra to install, when a module it installs is missing."""
    missing = [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"{purpose} needs the {extra} extra ({', '.join(missing)} not installed): "
            f"pip install 'ledgerflow[{extra}]'"
        )
