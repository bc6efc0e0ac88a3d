"""How the ``ledgerflow`` command shows things to a person: consoles, cells, tables (internal).

Two promises hold for everything printed through here:

- **Ledger contents are inert.** A business key, a reason or an evidence payload is data a
  caller wrote; a terminal escape sequence in it must not recolour, move or rewrite the
  operator's screen, and a bidirectional control must not reorder what is read. :func:`inert`
  shows every such character as a visible escape (``\\x1b``, ``\\u202e``); :func:`cell` applies
  it to every table cell, and it is never read as rich markup either.
- **No column is blanked.** A table that cannot give each column a readable width on the
  terminal (``COLUMNS=70``) is printed as one block of ``column  value`` lines per row
  instead of a table whose narrow columns would show nothing but ``…``.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ledgerflow.model.instance import InstanceStatus
from ledgerflow.model.names import refused_character

# Piped or captured output has no width; 80 columns would fold every idempotency key.
PIPED_WIDTH = 200
# How much of a payload a table cell shows; ``--json`` has everything.
SHORT_CHARS = 60
# A column narrower than this (when its content is wider) is not readable: the table is then
# printed as blocks, one per row.
READABLE_CHARS = 10


def console(*, stderr: bool = False) -> Console:
    """A console for the current stdout or stderr (made per call: a test runner swaps them)."""
    out = Console(highlight=False, stderr=stderr)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        # Tables still take only the width they need.
        out.width = PIPED_WIDTH
    return out


def inert(text: str) -> str:
    """``text`` with every control, bidirectional and line-breaking character shown as its
    escape, so that printing it cannot act on the terminal and stays on one line."""
    if not any(refused_character(char) for char in text):
        return text
    return "".join(_escaped(char) if refused_character(char) else char for char in text)


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def cell(value: Any) -> Text:
    """A table cell: the value's text, inert, never read as markup (``[LF102]`` stays)."""
    return Text("" if value is None else inert(str(value)))


def lines_cell(values: list[Any]) -> Text:
    """A cell of several lines, each made inert on its own."""
    return Text("\n").join(cell(value) for value in values)


def when(timestamp: float | None, *, precise: bool = False) -> str:
    """A ledger time in the operator's local zone."""
    if timestamp is None:
        return ""
    moment = datetime.fromtimestamp(timestamp, tz=UTC).astimezone()
    if precise:
        return moment.strftime("%H:%M:%S.%f")[:-3]
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def short(text: str | None, limit: int = SHORT_CHARS) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    if text is None:
        return ""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


_STATUS_STYLES = {
    InstanceStatus.SUCCEEDED: "green",
    InstanceStatus.SCHEDULED: "blue",
    InstanceStatus.RUNNING: "cyan",
    InstanceStatus.WAITING: "cyan",
    InstanceStatus.COMPENSATING: "yellow",
    InstanceStatus.CANCELLING: "yellow",
    InstanceStatus.COMPENSATED: "yellow",
    InstanceStatus.CANCELLED: "yellow",
    InstanceStatus.FAILED: "red",
    InstanceStatus.FORWARD_RECOVERY_REQUIRED: "red",
    InstanceStatus.MANUAL_INTERVENTION: "bold red",
}


def status_cell(status: InstanceStatus) -> Text:
    return Text(status.value, style=_STATUS_STYLES.get(status, ""))


def print_table(out: Console, table: Table) -> None:
    """Print ``table``, or its rows as blocks where the terminal is too narrow for it."""
    needs = [
        min(_natural_width(out, column.header, column.cells), READABLE_CHARS)
        for column in table.columns
    ]
    # Each column has a padding of one on either side and a rule before it; one rule ends.
    frame = len(needs) * 3 + 1 if table.show_edge else len(needs) * 3
    if sum(needs) + frame <= out.width:
        for column, need in zip(table.columns, needs, strict=True):
            column.min_width = max(column.min_width or 0, need)
        out.print(table)
        return
    out.print(_blocks(table))


def _natural_width(out: Console, header: RenderableType, cells: Any) -> int:
    widths = [out.measure(header).maximum]
    widths += [out.measure(value).maximum for value in cells]
    return max(widths)


def _blocks(table: Table) -> RenderableType:
    parts: list[RenderableType] = []
    if table.title:
        parts.append(Text(str(table.title), style="bold"))
    rows = zip(*(list(column.cells) for column in table.columns), strict=True)
    for index, row in enumerate(rows):
        if index or table.title:
            parts.append(Text(""))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        for column, value in zip(table.columns, row, strict=True):
            grid.add_row(column.header, value)
        parts.append(grid)
    return Group(*parts)
