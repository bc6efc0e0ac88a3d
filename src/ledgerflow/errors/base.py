"""The root of Ledgerflow's errors: a stable code, the identities involved as attributes,
and a text that names them (internal: import errors from :mod:`ledgerflow.errors`)."""

from __future__ import annotations

from typing import Any, ClassVar


class LedgerflowError(Exception):
    """Something went wrong in Ledgerflow."""

    code: ClassVar[str] = "LF000"
    # The identity attributes this error carries, in the order its text names them.
    ID_NAMES: ClassVar[tuple[str, ...]] = ()

    def __init__(self, message: str | None = None) -> None:
        text = message or (self.__doc__ or "").strip().splitlines()[0]
        super().__init__(text)
        self.message = text

    @property
    def ids(self) -> dict[str, Any]:
        """The identities involved that are known, by attribute name, in ``ID_NAMES`` order."""
        found = ((name, getattr(self, name, None)) for name in self.ID_NAMES)
        return {name: value for name, value in found if value is not None}

    def __str__(self) -> str:
        extra = ", ".join(f"{k}={v}" for k, v in self.ids.items())
        suffix = f" ({extra})" if extra else ""
        return f"[{self.code}] {self.message}{suffix}"
