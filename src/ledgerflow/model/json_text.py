"""Reading JSON that a caller typed, with its nesting bounded (internal).

Python's JSON reader is recursive: a document nested a few thousand levels deep (easy to send,
a few kilobytes of ``[``) ends in ``RecursionError`` rather than a readable refusal. Every edge
that reads a caller's JSON (a command's ``--input``, ``--payload``, an HTTP body) reads it with
:func:`loads`, which measures the nesting first, without recursion, and refuses anything deeper
than ``limits.JSON_DEPTH_MAX`` with :class:`~ledgerflow.errors.PayloadError`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ledgerflow import limits
from ledgerflow.errors import PayloadError

# A JSON string literal (escapes included): brackets inside one do not nest anything.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def nesting_depth(text: str) -> int:
    """How deeply the arrays and objects of ``text`` nest (0 for a scalar)."""
    depth = deepest = 0
    for bracket in _BRACKET.finditer(_STRING.sub('""', text)):
        if bracket.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def loads(text: str, *, what: str) -> Any:
    """``text`` as a JSON value; :class:`PayloadError` naming ``what`` when it is not one or
    nests deeper than ``limits.JSON_DEPTH_MAX``."""
    depth = nesting_depth(text)
    if depth > limits.JSON_DEPTH_MAX:
        raise PayloadError(
            f"{what} nests {depth} levels deep; at most {limits.JSON_DEPTH_MAX} are allowed"
        )
    try:
        return json.loads(text)
    except ValueError as exc:
        raise PayloadError(f"{what} is not valid JSON: {exc}") from None
