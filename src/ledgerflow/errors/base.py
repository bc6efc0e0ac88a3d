"""The root of Ledgerflow's errors: a stable code, the identities involved as attributes,
and a text that names them (internal: import errors from :mod:`ledgerflow.errors`).

An error's identities are typed fields, declared once on the class that carries them:
:func:`identities` makes them the keyword-only arguments of its constructor (``None`` when
not known), so no error spells out an ``__init__`` that only stores what it was given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self, TypeVar, dataclass_transform

ErrorT = TypeVar("ErrorT", bound="LedgerflowError")


@dataclass_transform(kw_only_default=True, eq_default=False)
def identities(cls: type[ErrorT]) -> type[ErrorT]:
    """Make the fields ``cls`` declares (its identities, and any other datum it carries)
    keyword-only arguments after the message. Errors compare by identity, as exceptions do,
    and keep the exception's own ``repr``."""
    return dataclass(eq=False, repr=False, kw_only=True)(cls)


# The root keeps its own constructor (``init=False``), so ``message`` takes None as it always
# has; the errors made with :func:`identities` get theirs from the fields, the message first.
@dataclass(eq=False, repr=False, init=False)
class LedgerflowError(Exception):
    """Something went wrong in Ledgerflow."""

    code: ClassVar[str] = "LF000"
    # The identity attributes this error carries, in the order its text names them.
    ID_NAMES: ClassVar[tuple[str, ...]] = ()

    # The text; none given means the first line of the class's docstring.
    message: str = ""
    # Writes the refusal this error reports must leave although it rolls back the
    # transaction it is raised in (an event refused by a full inbox is counted): every
    # transaction it leaves makes them again after rolling back (internal, the store's).
    kept: list[Callable[[], None]] = field(default_factory=list, init=False)

    def __init__(self, message: str | None = None) -> None:
        self.message = message or ""
        self.kept = []
        self.__post_init__()

    def __post_init__(self) -> None:
        text = self.message or (self.__doc__ or "").strip().splitlines()[0]
        super().__init__(text)
        self.message = text

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
