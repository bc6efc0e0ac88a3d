"""The root of Ledgerflow's errors: a stable code, the identities involved as attributes,
and a text that names them (internal: import errors from :mod:`ledgerflow.errors`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Self


class LedgerflowError(Exception):
    """Something went wrong in Ledgerflow."""

    code: ClassVar[str] = "LF000"
    # The identity attributes this error carries, in the order its text names them.
    ID_NAMES: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str | None = None) -> None:
        text = message or (self.__doc__ or "").strip().splitlines()[0]
        super().__init__(text)
        self.message = text
        # Writes the refusal this error reports must leave although it rolls back the
        # transaction it is raised in (an event refused by a full inbox is counted): every
        # transaction it leaves makes them again after rolling back (internal, the store's).
        self.kept: list[Callable[[], None]] = []

    def keep(self, write: Callable[[], None]) -> Self:
        """Have ``write`` made even though this error rolls its transaction back (internal)."""
        self.kept.append(write)
        return self

    @property
    def ids(self) -> dict[str, Any]:
        """The identities involved that are known, by attribute name, in ``ID_NAMES`` order."""
        found = ((name, getattr(self, name, None)) for name in self.ID_NAMES)
        return {name: value for name, value in found if value is not None}

    def __str__(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.ids.items())
        suffix = f" ({extra})" if extra else ""
        return f"[{self.code}] {self.message}{suffix}"
