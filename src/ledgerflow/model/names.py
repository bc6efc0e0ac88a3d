"""The one rule for the identifiers callers give: business keys, tenants, event names (internal).

A business key names an outcome ("start it twice, get one instance"), so two spellings that a
person reads as the same must be the same key, and a key must never be able to hide itself or
rewrite an operator's terminal. Every front door (the engine, the CLI, the HTTP endpoint) passes
what a caller gave through :func:`checked` before it is stored or looked up:

- Unicode NFC normalisation: ``é`` typed as one code point or as ``e`` + combining accent is one
  key (and so one instance id, which is derived from it);
- no control characters (C0, C1, DEL), no line or paragraph separators, no lone surrogates and
  no bidirectional controls (U+202E and friends reorder what a terminal shows);
- no leading or trailing whitespace (``" order-1"`` is a typo, not another order);
- not empty and at most a bounded number of characters (counted after normalisation).

A value that breaks the rule is refused with :class:`~ledgerflow.errors.PayloadError` saying
which part and where, never silently changed into something else (normalising is not a change:
both spellings mean the same text).
"""

from __future__ import annotations

import re
import unicodedata

from ledgerflow import limits
from ledgerflow.errors import PayloadError
from ledgerflow.model.ids import DEFAULT_TENANT, BusinessKey, TenantId

# Bidirectional formatting characters: they reorder the text around them when displayed.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
# Cc: C0/C1 controls and DEL; Cs: lone surrogates (not encodable); Zl/Zp: line breaks.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})


def refused_character(char: str) -> bool:
    """Whether ``char`` may not appear in an identifier (nor raw in a terminal cell)."""
    return char in BIDI_CONTROLS or unicodedata.category(char) in _REFUSED_CATEGORIES


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_storable(text: str, *, where: str) -> None:
    """The rule for any text a caller sends, whatever the face (an API body's strings and
    keys, a console form's fields): :class:`PayloadError` for a NUL character (no journal
    keeps one: PostgreSQL refuses it) or a lone surrogate (not Unicode text). Identifiers
    follow the stricter :func:`checked` on top of it."""
    if "\x00" in text:
        raise PayloadError(f"{where} holds a NUL character, which no journal stores")
    # A compiled class, not a loop in Python: a two-megabyte body is checked in milliseconds.
    # (A parser joins every valid surrogate pair, so any surrogate left is a lone one.)
    if _SURROGATE.search(text):
        raise PayloadError(f"{where} holds a lone surrogate: it is not Unicode text")


def checked(value: object, *, what: str, length_max: int) -> str:
    """``value`` in NFC if it follows the rule above, else :class:`PayloadError`."""
    if not isinstance(value, str):
        raise PayloadError(f"the {what} must be a string, not {type(value).__name__}")
    # A lone surrogate cannot be normalised (nor stored): refuse it before NFC sees it.
    for index, char in enumerate(value):
        if refused_character(char):
            raise PayloadError(
                f"the {what} holds a control or bidirectional character "
                f"(U+{ord(char):04X} at position {index}); use printable text"
            )
    text = unicodedata.normalize("NFC", value)
    if not text:
        raise PayloadError(f"the {what} must not be empty")
    if text != text.strip():
        raise PayloadError(f"the {what} must not begin or end with whitespace")
    if len(text) > length_max:
        raise PayloadError(
            f"the {what} has {len(text)} characters; at most {length_max} are allowed"
        )
    return text


def business_key(value: object) -> BusinessKey:
    """A caller's business key, checked and normalised."""
    return BusinessKey(
        checked(value, what="business key", length_max=limits.BUSINESS_KEY_LENGTH_MAX)
    )


def tenant(value: object | None) -> TenantId:
    """A caller's tenant; ``None`` (not given) is the default tenant, ``""`` is refused."""
    if value is None:
        return DEFAULT_TENANT
    return TenantId(checked(value, what="tenant", length_max=limits.TENANT_LENGTH_MAX))


def workflow_name(value: object) -> str:
    """A workflow name a caller looks instances up by (declared names follow a stricter rule
    at registration, see :func:`ledgerflow.model.definition.check_name`)."""
    return checked(value, what="workflow name", length_max=limits.NAME_LENGTH_MAX)


def event_text(value: object, *, what: str) -> str:
    """A signal name, event id or sender, checked and normalised."""
    return checked(value, what=what, length_max=limits.EVENT_ID_LENGTH_MAX)
