"""Turn a store URL into a store (internal).

``sqlite:///relative.db``, ``sqlite:////absolute.db`` or a plain file path; query options
(``?synchronous=normal``) select the explicit, less durable settings.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from ledgerflow.errors import ConfigurationError
from ledgerflow.storage.store import Store


def open_store(url: str) -> Store:
    if "://" not in url:
        url = f"sqlite:///{url}"
    parts = urlsplit(url)
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if parts.scheme == "sqlite":
        from ledgerflow.storage.sqlite import SqliteStore

        path = url.split("://", 1)[1].split("?", 1)[0]
        path = path[1:] if path.startswith("/") else path
        if not path:
            raise ConfigurationError(f"store URL {url!r} names no file")
        unknown = set(options) - {"synchronous"}
        if unknown:
            raise ConfigurationError(f"unknown SQLite option(s): {', '.join(sorted(unknown))}")
        return SqliteStore(path, synchronous=options.get("synchronous", "full"))
    if parts.scheme in ("postgresql", "postgres"):
        from ledgerflow.storage.postgres import PostgresStore

        unknown = set(options) - {"schema"}
        if unknown:
            raise ConfigurationError(f"unknown PostgreSQL option(s): {', '.join(sorted(unknown))}")
        return PostgresStore(url, schema=options.get("schema", "ledgerflow"))
    raise ConfigurationError(f"unsupported store URL scheme {parts.scheme!r} in {url!r}")
