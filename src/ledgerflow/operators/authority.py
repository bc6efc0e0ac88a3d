"""Loading the repair authority policy from a TOML file or the environment (internal).

The file names roles and who holds them::

    [roles]
    operator = ["resolve-effect", "retry-step", "skip-step", "resume", "cancel"]
    supervisor = ["force-terminal", "run-compensation", "skip-compensation"]

    [actors]
    alice = ["operator"]
    bob = ["operator", "supervisor"]

Without a file (``LEDGERFLOW_AUTHORITY`` unset) the built-in policy applies: only the
reconciler holds a role, so a person's repair is refused until someone grants them one.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from ledgerflow.errors import ConfigurationError
from ledgerflow.model.authority import ENVIRONMENT_VARIABLE, RECONCILER, Policy

__all__ = ["RECONCILER", "Authority"]


class Authority(Policy):
    """The policy :class:`~ledgerflow.operators.repairs.Repairs` checks every repair with.

    Example::

        authority = Authority.from_environment()
        role = authority.role_for("alice", RepairKind.RESUME)  # or NotAuthorizedError
    """

    __slots__ = ()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Authority:
        source = str(path)
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigurationError(f"cannot read authority file {source}: {exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigurationError(f"authority file {source} is not TOML: {exc}") from None
        policy = Policy.parse(data, source=source)
        return cls(roles=policy.roles, actors=policy.actors, source=policy.source)

    @classmethod
    def from_environment(cls) -> Authority:
        path = os.environ.get(ENVIRONMENT_VARIABLE)
        if path:
            return cls.from_file(path)
        return cls.default()

    @classmethod
    def default(cls) -> Authority:
        policy = Policy.builtin()
        return cls(roles=policy.roles, actors=policy.actors, source=policy.source)
