"""Payload encoding: JSON by default, pluggable, bounded.

Ledgers hold data, never pickled objects, closures or clients. A codec turns a payload into text
and back; the default encodes JSON with sorted keys so that equal payloads have equal text
(replay compares recorded inputs by their encoding).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from ledgerflow import limits
from ledgerflow.errors import PayloadError


class Codec(Protocol):
    """How payloads become ledger text. Plug in another one with ``Engine(codec=...)``."""

    name: str

    def encode(self, value: Any) -> str:
        """A value as ledger text (inputs, outputs, payloads)."""

    def decode(self, text: str) -> Any:
        """The value ledger text written by :meth:`encode` holds."""


class JsonCodec:
    """Canonical JSON: sorted keys, no NaN, no objects JSON cannot represent."""

    name = "json"

    def encode(self, value: Any) -> str:
        """A JSON value as compact, key-sorted JSON text; PayloadError for anything that is not
        JSON."""
        try:
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise PayloadError(f"payload is not JSON-serialisable: {exc}") from None
        except RecursionError:
            # The encoder recurses once per level: a value nested this deep (or one that holds
            # itself) cannot become ledger text.
            raise PayloadError("payload nests too deeply to encode as JSON") from None
        if len(text) > limits.PAYLOAD_BYTES_MAX:
            raise PayloadError(
                f"payload of {len(text)} bytes exceeds the limit of {limits.PAYLOAD_BYTES_MAX}"
            )
        return text

    def decode(self, text: str) -> Any:
        """The JSON value of ledger text; PayloadError when it is not JSON."""
        try:
            return json.loads(text)
        except ValueError as exc:
            raise PayloadError(f"ledger payload is not valid JSON: {exc}") from None
        except RecursionError:
            raise PayloadError("ledger payload nests too deeply to decode") from None


JSON = JsonCodec()
