"""A MkDocs hook: the command line reference without click's internal "no default" marker.

mkdocs-click prints each option's default as click gives it; click 8.2 and later give an
option without a default as its ``Sentinel.UNSET`` marker, which mkdocs-click prints as
``Sentinel.UNSET``. Here such a cell says nothing, as ``--help`` does.
"""

from __future__ import annotations

from typing import Any

PAGE = "reference/cli.md"
UNSET = "<td><code>Sentinel.UNSET</code></td>"


def on_page_content(html: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return html
    return html.replace(UNSET, "<td></td>")
