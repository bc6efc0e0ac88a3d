"""What each module of the package imports, read from its source (never by importing it).

Shared by the ratchets that read the code: the layer rule (``test_layers.py``) and the tidy
rules (``test_tidy.py``). Every import counts, including those inside functions, since an
import deferred into a function is still a dependency.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGE = SRC / "ledgerflow"


@dataclass(frozen=True)
class Import:
    """One imported module, with the names taken from it (empty for ``import x``)."""

    module: str
    names: tuple[str, ...]
    line: int


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def relative(path: Path) -> str:
    """The module's path below the package, ``runtime/worker.py``."""
    return path.relative_to(PACKAGE).as_posix()


def module_name(path: Path) -> str:
    """The dotted name, ``ledgerflow.runtime.worker`` (a package is its ``__init__``)."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str) -> bool:
    path = SRC.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imports(path: Path) -> list[Import]:
    """Every import of a file, absolute. ``from package import module`` names the module; any
    other ``from x import name`` names ``x``."""
    tree = ast.parse(path.read_text())
    # The package a relative import starts from: the module's own (its ``__init__``'s, for one).
    package = ".".join(path.relative_to(SRC).with_suffix("").parts[:-1])
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Import(alias.name, (), node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            plain: list[str] = []
            for alias in node.names:
                if base.startswith("ledgerflow") and _is_module(f"{base}.{alias.name}"):
                    found.append(Import(f"{base}.{alias.name}", (), node.lineno))
                else:
                    plain.append(alias.name)
            if plain:
                found.append(Import(base, tuple(plain), node.lineno))
    return found


def imported_modules(path: Path) -> set[str]:
    return {i.module for i in imports(path)}
