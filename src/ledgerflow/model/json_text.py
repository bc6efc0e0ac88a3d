"""Reading JSON that a caller typed, with its nesting and its size in values bounded
(internal).

Python's JSON reader is recursive: a document nested a few thousand levels deep (easy to send,
a few kilobytes of ``[``) ends in ``RecursionError`` rather than a readable refusal. And it
holds the interpreter for the whole parse: two megabytes of ``[],`` are 700,000 lists built
(and traced by the garbage collector) in one call that no other thread interrupts, a server's
event loop included. Every edge that reads a caller's JSON (a command's ``--input``,
``--payload``, an HTTP body, a console field) reads it with :func:`loads`, which measures the
text first and refuses, with :class:`~ledgerflow.errors.PayloadError`, anything nested deeper
than ``limits.JSON_DEPTH_MAX`` or holding more than ``limits.JSON_VALUES_MAX`` values.

The measure is linear in the text, whatever the text: a caller's body reaches it before
anything has proven it well formed, so a pattern that would make a backtracking expression
retry every start of an unterminated string (``"`` then ``\\"`` repeated) costs no more than
any other text of its size. The string expression is possessive (it never gives back what it
matched), and the brackets are counted in slices, so no single step holds the interpreter
for long.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import PayloadError

# A JSON string literal, escapes included, or what is left of an unterminated one: brackets
# and commas inside it are text. Possessive, so each character is looked at once.
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
# Strings taken out per call: one call of the expression holds the interpreter, so a text of a
# million short strings is taken apart in several calls of a few milliseconds each.
_STRINGS_PER_CALL = 20_000
# What is left outside strings is ASCII in any JSON text; these bytes are its structure.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b"[]{},")
_STEPS = [{ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}.get(b, 0) for b in range(256)]
# Brackets counted per slice, likewise a few milliseconds per call.
_SLICE = 65_536


@dataclass(frozen=True, slots=True)
class Shape:
    """What :func:`measure` finds: how deeply the text nests (0 for a scalar) and how many
    values it holds at most (the document itself, and what follows each opening bracket and
    each comma)."""

    depth: int
    values: int


def _outside_strings(text: str) -> bytes:
    """``text`` without its string literals, as bytes."""
    pieces: list[str] = []
    rest = text
    while True:
        parts = _STRING.split(rest, maxsplit=_STRINGS_PER_CALL)
        if len(parts) <= _STRINGS_PER_CALL:
            pieces.extend(parts)
            break
        pieces.extend(parts[:-1])
        rest = parts[-1]
    # "surrogatepass": a caller's text may hold a lone surrogate; it is no structure either.
    return "".join(pieces).encode("utf-8", "surrogatepass")


def measure(text: str) -> Shape:
    """The shape of ``text`` read as JSON, in time linear in its length (whether or not it
    is well formed: a malformed text is refused by the parser afterwards)."""
    structure = _outside_strings(text).translate(None, _NOT_STRUCTURE)
    brackets = structure.replace(b",", b"")
    depth = deepest = 0
    for start in range(0, len(brackets), _SLICE):
        part = brackets[start : start + _SLICE]
        deepest = max(deepest, max(accumulate(map(_STEPS.__getitem__, part), initial=depth)))
        depth += part.count(b"[") + part.count(b"{") - part.count(b"]") - part.count(b"}")
    opened = brackets.count(b"[") + brackets.count(b"{")
    return Shape(depth=deepest, values=1 + len(structure) - len(brackets) + opened)


def nesting_depth(text: str) -> int:
    """How deeply the arrays and objects of ``text`` nest (0 for a scalar)."""
    return measure(text).depth


def loads(text: str, *, what: str, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``text`` as a JSON value; :class:`PayloadError` naming ``what`` when it is not one,
    nests deeper than ``limits.JSON_DEPTH_MAX`` or holds more than ``limits.JSON_VALUES_MAX``
    values. ``parse_constant``: what ``NaN`` and the infinities become (``json``'s hook; it
    may raise :class:`PayloadError` to refuse them)."""
    shape = measure(text)
    if shape.depth > limits.JSON_DEPTH_MAX:
        raise PayloadError(
            f"{what} nests {shape.depth} levels deep; at most {limits.JSON_DEPTH_MAX} are allowed"
        )
    if shape.values > limits.JSON_VALUES_MAX:
        raise PayloadError(
            f"{what} holds about {shape.values} JSON values; at most {limits.JSON_VALUES_MAX} "
            f"are read (keep bulk data elsewhere, with a reference in the payload)"
        )
    try:
        return json.loads(text, parse_constant=parse_constant)
    except ValueError as exc:
        raise PayloadError(f"{what} is not valid JSON: {exc}") from None
