"""Errors of what a caller gives: declarations and settings, payloads, HTTP requests
(internal: import errors from :mod:`ledgerflow.errors`)."""

from __future__ import annotations

from ledgerflow.errors.base import LedgerflowError, identities


class ConfigurationError(LedgerflowError):
    """A declaration or setting is invalid."""

    code = "LF100"


class RegistrationError(ConfigurationError):
    """A participant, effect or workflow is declared wrongly."""

    code = "LF101"


@identities
class UnknownWorkflowError(ConfigurationError):
    """No workflow of that name is registered."""

    code = "LF102"
    ID_NAMES = ("workflow",)

    workflow: str | None = None


@identities
class UnknownVersionError(ConfigurationError):
    """The workflow is registered, but not at that version."""

    code = "LF103"
    ID_NAMES = ("workflow", "version")

    workflow: str | None = None
    version: int | None = None


class CommandLineError(ConfigurationError):
    """The command line could not be understood: an unknown option, a missing or bad value."""

    code = "LF104"


class MissingExtraError(ConfigurationError):
    """An optional part of Ledgerflow is not installed; the message names the extra to add."""

    code = "LF105"


@identities
class VersionRetiredError(ConfigurationError):
    """That workflow version is retired: no new instance may start pinned to it."""

    code = "LF106"
    ID_NAMES = ("workflow", "version")

    workflow: str | None = None
    version: int | None = None


class ArrivalsError(ConfigurationError):
    """A script of arrivals (``ledgerflow verify --arrivals FILE``, or the events of an
    ``Example``) is malformed: an unknown key, a sender that is not text, a payload that is not
    JSON, more arrivals than allowed."""

    code = "LF107"


class NoTransactionError(ConfigurationError):
    """The connection lent to the engine (``engine.within(connection)``) holds no transaction
    its writes may join: it is in autocommit mode with none open (the engine would have to
    commit on its own), or its transaction has failed and must be rolled back first."""

    code = "LF316"


class PayloadError(LedgerflowError):
    """A request's field or a payload cannot be taken as given: missing or invalid, not JSON,
    larger than allowed, or a name that breaks the naming rule."""

    code = "LF110"


class PayloadTooLargeError(PayloadError):
    """A request body is larger than its bound; it was refused before being read past it."""

    code = "LF111"


@identities
class InboxFullError(PayloadError):
    """The instance's inbox holds as many events no wait has taken as it may (in number or in
    payload bytes): the event was refused, not kept, only counted."""

    code = "LF112"
    ID_NAMES = ("instance_id", "event_id")

    instance_id: str | None = None
    event_id: str | None = None


@identities
class ReservedNameError(PayloadError):
    """A name in a namespace only Ledgerflow itself writes: a signal named ``complete:...``
    (only an effect's completion is delivered under it) or a token named like a principal
    Ledgerflow names itself (``ledgerflow:...``, ``local:...``, ``insecure-local``)."""

    code = "LF113"
    ID_NAMES = ("name",)

    name: str | None = None


class RequestError(LedgerflowError):
    """An HTTP request the API cannot take as it was sent (its route, method or media type)."""

    code = "LF120"


class RouteNotFoundError(RequestError):
    """No route of the API has this path."""

    code = "LF121"


class MethodNotAllowedError(RequestError):
    """The route exists, but does not take this method."""

    code = "LF122"


class UnsupportedMediaTypeError(RequestError):
    """The body is not in the media type the route reads (application/json)."""

    code = "LF123"


class InvalidCursorError(RequestError):
    """A listing's cursor is not one this API gave (forged, altered or cut short)."""

    code = "LF124"


class HostNotAllowedError(RequestError):
    """The request's Host header names a host this server does not answer for."""

    code = "LF125"


class RequestTimeoutError(RequestError):
    """The request's head or body did not arrive within its bound; the connection was closed."""

    code = "LF126"


class ServerBusyError(RequestError):
    """The server holds every connection it may, all of them busy with a request; retry."""

    code = "LF127"
