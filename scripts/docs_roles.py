"""A MkDocs hook: the docstrings' Sphinx cross-reference roles, rendered as code.

The docstrings write ``:class:`~ledgerflow.errors.EffectFailedError``` and end an example's
lead-in with ``::`` (reStructuredText); mkdocstrings renders the role's text as code but
leaves ``:class:`` before it, and the ``::`` (after a word, or alone on its line). This hook
keeps the code (the last dotted part when the reference starts with ``~``, as Sphinx shows
it) and drops the rest.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|meth|func|mod|attr|exc|data|obj):<code>(~?)([^<]+)</code>")
_LEAD_IN = re.compile(r"(\w)::(</p>)")
_ALONE = re.compile(r"<p>::</p>\s*")


def _code(match: re.Match[str]) -> str:
    target = match.group(2)
    if match.group(1):
        target = target.rsplit(".", 1)[-1]
    return f"<code>{target}</code>"


def on_page_content(html: str, **_: Any) -> str:
    return _ALONE.sub("", _LEAD_IN.sub(r"\1:\2", _ROLE.sub(_code, html)))
