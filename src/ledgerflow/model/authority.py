"""Who may do what: the authority file's grants, the API tokens' roles, and one policy the
repairs are checked with (pure).

Two sources of authority meet here, and they have distinct words:

- A person at the command line is an *actor* (``local:`` and the account they run the command
  under, unless they act with an API token) who holds *grants* from the authority file
  (:class:`Policy`): a grant is a name the file defines for a set of repair kinds and version
  commands (``[grants]``), and ``[actors]`` says who holds which. The names are the file's
  own; nothing but the file gives them a meaning. (``[roles]`` is the old name of
  ``[grants]``, still read with the same meaning.)
- A caller of the HTTP API or the console is a :class:`Principal`: the name, *role*
  (:class:`ApiRole`, the fixed ladder ``viewer`` < ``signaller`` < ``operator`` < ``admin``)
  and tenant of the token it presented. Its role allows the repair kinds
  :data:`API_ROLE_REPAIRS` lists, as a policy of its own (:meth:`Policy.for_principal`), so
  repairs are checked by the same code whoever asks.

Authority is configuration checked by the engine (``operators.repairs.Repairs``), never by
the CLI, so every front door (CLI, HTTP, the reconciler) is held to the same policy.
Without a policy file only the reconciler, :data:`RECONCILER`, holds a grant: a person must be
granted one explicitly before any repair of theirs is carried out. Loading the file is
:mod:`ledgerflow.operators.authority`'s job; this module only parses and decides.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ledgerflow.errors import ConfigurationError, NotAuthorizedError
from ledgerflow.model.repair import RepairKind

# The reconciler's identity: it settles UNKNOWN effects with a participant's lookup evidence
# and resumes what it settled, and nothing else.
RECONCILER = "ledgerflow:reconciler"
RECONCILER_GRANT = "reconciler"
RECONCILER_KINDS = frozenset({RepairKind.RESOLVE_EFFECT, RepairKind.RESUME})
ACTOR_LENGTH_MAX = 200
ENVIRONMENT_VARIABLE = "LEDGERFLOW_AUTHORITY"
# The authority file's section of grants, and its old name (read with the same meaning).
GRANTS = "grants"
OLD_GRANTS = "roles"
BUILTIN_SOURCE = "built-in policy"
# Whom a server run with --insecure-no-auth takes every caller for.
INSECURE_LOCAL = "insecure-local"
# A person at the command line with no token: "local:" and the account they run it under.
LOCAL_PREFIX = "local:"
# Principals Ledgerflow names itself (the reconciler, a person at the command line): a token
# named so could pass for one of them on the audit log, so none may be.
RESERVED_PREFIXES = ("ledgerflow:", LOCAL_PREFIX)


def reserved_principal(name: str) -> bool:
    """Whether ``name`` is one Ledgerflow gives its own principals (any letter case)."""
    folded = name.casefold()
    return folded == INSECURE_LOCAL or folded.startswith(RESERVED_PREFIXES)


class VersionCommand(enum.Enum):
    """The commands on definition versions an authority file grants beside the repairs: a
    move of in-flight instances to other code, and a version's retirement (their names are
    the kinds of their audit records)."""

    UPGRADE = "upgrade"
    MIGRATE = "migrate"
    RETIRE = "retire-version"


# What a grant of an authority file (or a token's role) may allow: a repair kind or a version
# command.
Grant = RepairKind | VersionCommand


def checked_actor(actor: str | None) -> str:
    """An operator identity: required, non-blank, bounded."""
    name = (actor or "").strip()
    if not name:
        raise NotAuthorizedError(
            "an operator identity is required: a repair names who carries it out"
        )
    if len(name) > ACTOR_LENGTH_MAX:
        raise NotAuthorizedError(f"an operator identity is at most {ACTOR_LENGTH_MAX} characters")
    return name


class ApiRole(enum.Enum):
    """A token's role, each allowing what the ones before it allow and more."""

    VIEWER = "viewer"  # reads everything of its tenant
    SIGNALLER = "signaller"  # and starts instances, sends signals, approvals, callbacks
    OPERATOR = "operator"  # and cancels and repairs (all but force)
    ADMIN = "admin"  # and forces a terminal state; may be scoped to every tenant

    @property
    def rank(self) -> int:
        return list(ApiRole).index(self)

    def allows(self, needed: ApiRole) -> bool:
        return self.rank >= needed.rank


# The tenant scope of a principal that sees every tenant (an admin token only).
ALL_TENANTS = "*"

API_ROLE_REPAIRS: Mapping[ApiRole, frozenset[RepairKind]] = {
    ApiRole.VIEWER: frozenset(),
    ApiRole.SIGNALLER: frozenset(),
    ApiRole.OPERATOR: frozenset(set(RepairKind) - {RepairKind.FORCE_TERMINAL}),
    ApiRole.ADMIN: frozenset(RepairKind),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """Who is calling through the API or the console: a token's name, role and tenant.

    ``tenant`` is one tenant, or :data:`ALL_TENANTS` for an admin that sees them all.
    ``token_id`` names the token (None for a server run with ``--insecure-no-auth``).
    """

    name: str
    role: ApiRole
    tenant: str
    token_id: str | None = None

    def sees(self, tenant: str) -> bool:
        """Whether this principal may see and touch an instance of ``tenant``."""
        return self.tenant in (ALL_TENANTS, tenant)

    @property
    def tenant_filter(self) -> str | None:
        """The tenant a listing is limited to (None: every tenant)."""
        return None if self.tenant == ALL_TENANTS else self.tenant


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Grants (name -> the repair kinds and version commands they allow) and actors (name ->
    the grants they hold). The policy of an API principal has one grant, named after its
    token's role (``token_role``), which its messages speak of as that role."""

    grants: Mapping[str, frozenset[Grant]]
    actors: Mapping[str, frozenset[str]]
    # Where the policy came from, for messages: a file path or "built-in policy".
    source: str
    token_role: ApiRole | None = None

    @classmethod
    def builtin(cls) -> Policy:
        return cls(
            grants={RECONCILER_GRANT: RECONCILER_KINDS},
            actors={RECONCILER: frozenset({RECONCILER_GRANT})},
            source=BUILTIN_SOURCE,
        )

    @classmethod
    def for_principal(cls, principal: Principal) -> Policy:
        """The policy an API principal is held to: its token's role, and what it allows."""
        role = principal.role.value
        return cls(
            grants={role: API_ROLE_REPAIRS[principal.role]},
            actors={checked_actor(principal.name): frozenset({role})},
            source=f"the {role} role of {principal.token_id or 'the unauthenticated server'}",
            token_role=principal.role,
        )

    @classmethod
    def parse(cls, data: Mapping[str, Any], *, source: str) -> Policy:
        """A policy from its document: ``grants`` (name -> kinds; ``roles`` is its old name)
        and ``actors`` (name -> grants).

        The reconciler keeps its built-in grant unless the document names it under ``actors``;
        a grant or kind that does not exist is a configuration error, not a silent no-op.
        """
        unknown = set(data) - {GRANTS, OLD_GRANTS, "actors"}
        if unknown:
            raise ConfigurationError(f"{source}: unknown section(s) {sorted(unknown)}")
        if GRANTS in data and OLD_GRANTS in data:
            raise ConfigurationError(
                f"{source}: [{OLD_GRANTS}] is the old name of [{GRANTS}]; use one of them"
            )
        section = OLD_GRANTS if OLD_GRANTS in data else GRANTS
        kinds: dict[str, Grant] = {k.value: k for k in (*RepairKind, *VersionCommand)}
        grants: dict[str, frozenset[Grant]] = {RECONCILER_GRANT: RECONCILER_KINDS}
        for grant, allowed in _table(data, section, source).items():
            names = _names(allowed, f"{source}: {section}.{grant}")
            bad = [n for n in names if n not in kinds]
            if bad:
                raise ConfigurationError(
                    f"{source}: {section}.{grant} names unknown repair kind(s) or version "
                    f"command(s) {bad}; known: {sorted(kinds)}"
                )
            grants[grant] = frozenset(kinds[n] for n in names)
        actors: dict[str, frozenset[str]] = {RECONCILER: frozenset({RECONCILER_GRANT})}
        for actor, held in _table(data, "actors", source).items():
            names = _names(held, f"{source}: actors.{actor}")
            bad = [n for n in names if n not in grants]
            if bad:
                raise ConfigurationError(
                    f"{source}: actors.{actor} holds grant(s) [{GRANTS}] does not define: {bad}"
                )
            actors[checked_actor(actor)] = frozenset(names)
        return cls(grants=grants, actors=actors, source=source)

    def grant_for(self, actor: str, kind: Grant) -> str:
        """The grant (a token's role, for an API principal) that allows ``actor`` to run
        ``kind``, else :class:`NotAuthorizedError` saying what is missing and where to get it."""
        name = checked_actor(actor)
        held = sorted(self.actors.get(name, frozenset()))
        for grant in held:
            if kind in self.grants.get(grant, frozenset()):
                return grant
        raise NotAuthorizedError(self._refusal(name, kind, held), actor=name, kind=kind.value)

    def allowed_by(self, grant: str) -> str:
        """How a message names what allowed a command: ``role operator`` (a token's) or
        ``grant repairs`` (the authority file's)."""
        return f"role {grant}" if self.token_role is not None else f"grant {grant}"

    def _refusal(self, name: str, kind: Grant, held: list[str]) -> str:
        if self.token_role is not None:
            needed = [r.value for r in ApiRole if kind in API_ROLE_REPAIRS[r]]
            allowing = f"; the {needed[0]} role allows it" if needed else ""
            return (
                f"{name}'s token has the {self.token_role.value} role, which does not allow "
                f"{kind.value}{allowing}"
            )
        text = (
            f"{name} holds no grant that allows {kind.value} in the authority file (grants "
            f"held: {', '.join(held) or 'none'}; authority: {self.source})"
        )
        if self.source == BUILTIN_SOURCE:
            return (
                f"{text}; no authority file is set, and the built-in policy grants nothing to "
                f"a person: set {ENVIRONMENT_VARIABLE} (or --authority) to a file whose "
                "[grants] allow it and whose [actors] name you (see docs/operators.md, "
                '"Authority")'
            )
        if name.startswith(LOCAL_PREFIX) and not held:
            return (
                f"{text}; the file names a person at the command line as {name!r} (their "
                "account), or they act with an API token (--token)"
            )
        return text


def _table(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    table = data.get(key, {})
    if not isinstance(table, Mapping):
        raise ConfigurationError(f"{source}: [{key}] must be a table")
    return table


def _names(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{where} must be a list of strings")
    return list(value)
