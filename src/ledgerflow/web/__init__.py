"""The HTTP front door: the authenticated, tenant-scoped API under ``/v1`` and the operator
console under ``/console`` (internal).

:func:`create_app` is the app; every request goes through the operators' service, scoped to
the principal that made it, as the ``ledgerflow`` command goes through it. ``ledgerflow
serve`` runs it under uvicorn with the host names it answers (:func:`allowed_hosts`) and the
bounds and protocol of its connections (:func:`connection_bounds`, :func:`protocol_class`).
Importing this package needs the ``http`` extra."""

from __future__ import annotations

from ledgerflow.web.app import create_app
from ledgerflow.web.connections import ConnectionBounds, connection_bounds, protocol_class
from ledgerflow.web.hosts import AllowedHosts, allowed_hosts

__all__ = [
    "AllowedHosts",
    "ConnectionBounds",
    "allowed_hosts",
    "connection_bounds",
    "create_app",
    "protocol_class",
]
