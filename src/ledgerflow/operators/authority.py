"""Loading the repair authority policy from a TOML file or the environment (internal).

The file names grants (sets of repair kinds and version commands, under names it chooses) and
who holds them::

    [grants]
    repairs = ["resolve-effect", "retry-step", "skip-step", "resume", "cancel"]
    supervision = ["force-terminal", "run-compensation", "skip-compensation"]

    [actors]
    "local:alice" = ["repairs"]
    "local:bob" = ["repairs", "supervision"]

(``[roles]``, the section's old name, is read with the same meaning.) Grants are not the API
tokens' roles (``viewer`` < ``signaller`` < ``operator`` < ``admin``): those are fixed and
checked for a caller with a token, the file for a person at the command line without one.

Without a file (``LEDGERFLOW_AUTHORITY`` unset) the built-in policy applies: only the
reconciler holds a grant, so a person's repair is refused until a file grants them one.

A person at the command line without an API token is :func:`local_principal`: ``local:`` and
the operating system's name of the account the command runs under, which the file names as
``"local:alice"``. (That is attribution, not a lock: whoever holds the database's credentials
can do anything, see ``docs/operators.md``.)
"""

from __future__ import annotations

import getpass
import os
import tomllib
from pathlib import Path

from ledgerflow.errors import ConfigurationError
from ledgerflow.model.authority import ENVIRONMENT_VARIABLE, LOCAL_PREFIX, RECONCILER, Policy

__all__ = ["RECONCILER", "Authority", "claimed", "local_principal"]

# How a name someone gave for themselves is kept beside who they proved to be.
CLAIMING = " claiming "


def claimed(principal: str, name: str) -> str:
    """A name given by ``principal`` without proof (``ledgerflow signal --sender`` with no
    token), as it is kept: ``local:alice claiming cfo``. It never equals a name an approval
    lists, so it approves nothing; it says who typed it and what they said."""
    return f"{principal}{CLAIMING}{name.strip()}"


def local_principal() -> str:
    """``local:`` and the account this process runs under, by its effective user id as the
    operating system names it (not ``$USER``, which anyone may set; an id with no name is
    ``uid-N``). Where there are no user ids (Windows), the login name."""
    try:
        import pwd
    except ImportError:  # no POSIX accounts on this system
        return f"{LOCAL_PREFIX}{getpass.getuser()}"
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:  # an account the system has no name for (a container's user, say)
        name = f"uid-{uid}"
    return f"{LOCAL_PREFIX}{name}"


class Authority(Policy):
    """The policy :class:`~ledgerflow.operators.repairs.Repairs` checks every repair with.

    Example::

        authority = Authority.from_environment()
        grant = authority.grant_for("local:alice", RepairKind.RESUME)  # or NotAuthorizedError
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
        return cls.of(Policy.parse(data, source=source))

    @classmethod
    def from_environment(cls) -> Authority:
        path = os.environ.get(ENVIRONMENT_VARIABLE)
        if path:
            return cls.from_file(path)
        return cls.default()

    @classmethod
    def default(cls) -> Authority:
        return cls.of(Policy.builtin())

    @classmethod
    def of(cls, policy: Policy) -> Authority:
        """``policy`` as an authority (the file's, the built-in one, or a token's role's)."""
        return cls(
            grants=policy.grants,
            actors=policy.actors,
            source=policy.source,
            token_role=policy.token_role,
        )
