"""Who may do what: roles grant repair kinds and version commands, actors hold roles;
principals of the API (pure).

Two sources of authority meet here. A person at the command line is an *actor* whose roles
come from the authority file (:class:`Policy`): ``local:`` and the account they run the
command under, unless they act with an API token. A caller of the HTTP API or the console is a
:class:`Principal`: the name, :class:`ApiRole` and tenant of the token it presented; its role
grants the repair kinds :data:`API_ROLE_REPAIRS` lists, as a policy of its own
(:meth:`Policy.for_principal`), so repairs are checked by the same code whoever asks.

Authority is configuration checked by the engine (``operators.repairs.Repairs``), never by
the CLI, so every front door (CLI, HTTP, the reconciler) is held to the same policy.
Without a policy file only the reconciler, :data:`RECONCILER`, holds a role: a person must be
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
RECONCILER_ROLE = "reconciler"
RECONCILER_KINDS = frozenset({RepairKind.RESOLVE_EFFECT, RepairKind.RESUME})
ACTOR_LENGTH_MAX = 200
ENVIRONMENT_VARIABLE = "LEDGERFLOW_AUTHORITY"
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


# What a role of an authority file may grant.
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
    """Roles (name -> the repair kinds and version commands they allow) and actors (name ->
    the roles they hold)."""

    roles: Mapping[str, frozenset[Grant]]
    actors: Mapping[str, frozenset[str]]
    # Where the policy came from, for messages: a file path or "built-in policy".
    source: str

    @classmethod
    def builtin(cls) -> Policy:
        return cls(
            roles={RECONCILER_ROLE: RECONCILER_KINDS},
            actors={RECONCILER: frozenset({RECONCILER_ROLE})},
            source="built-in policy",
        )

    @classmethod
    def for_principal(cls, principal: Principal) -> Policy:
        """The policy an API principal is held to: its token's role, and what it grants."""
        role = principal.role.value
        return cls(
            roles={role: API_ROLE_REPAIRS[principal.role]},
            actors={checked_actor(principal.name): frozenset({role})},
            source=f"the {role} role of {principal.token_id or 'the unauthenticated server'}",
        )

    @classmethod
    def parse(cls, data: Mapping[str, Any], *, source: str) -> Policy:
        """A policy from its document: ``roles`` (name -> kinds) and ``actors`` (name -> roles).

        The reconciler keeps its built-in role unless the document names it under ``actors``;
        a role or kind that does not exist is a configuration error, not a silent no-op.
        """
        unknown = set(data) - {"roles", "actors"}
        if unknown:
            raise ConfigurationError(f"{source}: unknown section(s) {sorted(unknown)}")
        kinds: dict[str, Grant] = {k.value: k for k in (*RepairKind, *VersionCommand)}
        roles: dict[str, frozenset[Grant]] = {RECONCILER_ROLE: RECONCILER_KINDS}
        for role, granted in _table(data, "roles", source).items():
            names = _names(granted, f"{source}: roles.{role}")
            bad = [n for n in names if n not in kinds]
            if bad:
                raise ConfigurationError(
                    f"{source}: roles.{role} names unknown repair kind(s) or version "
                    f"command(s) {bad}; known: {sorted(kinds)}"
                )
            roles[role] = frozenset(kinds[n] for n in names)
        actors: dict[str, frozenset[str]] = {RECONCILER: frozenset({RECONCILER_ROLE})}
        for actor, held in _table(data, "actors", source).items():
            names = _names(held, f"{source}: actors.{actor}")
            bad = [n for n in names if n not in roles]
            if bad:
                raise ConfigurationError(f"{source}: actors.{actor} holds undefined role(s) {bad}")
            actors[checked_actor(actor)] = frozenset(names)
        return cls(roles=roles, actors=actors, source=source)

    def role_for(self, actor: str, kind: Grant) -> str:
        """The role that allows ``actor`` to run ``kind``, else :class:`NotAuthorizedError`."""
        name = checked_actor(actor)
        for role in sorted(self.actors.get(name, frozenset())):
            if kind in self.roles.get(role, frozenset()):
                return role
        held = sorted(self.actors.get(name, frozenset()))
        hint = ""
        if self.source == "built-in policy":
            hint = (
                f"; set {ENVIRONMENT_VARIABLE} to a policy file that grants a role (see "
                "docs/operators.md)"
            )
        elif name.startswith(LOCAL_PREFIX) and not held:
            hint = (
                f"; the file names a person at the command line as {name!r} (their account), "
                "or they act with an API token (--token)"
            )
        raise NotAuthorizedError(
            f"{name} holds no role that allows {kind.value} (roles held: "
            f"{', '.join(held) or 'none'}; authority: {self.source}){hint}",
            actor=name,
            kind=kind.value,
        )


def _table(data: Mapping[str, Any], key: str, source: str) -> Mapping[str, Any]:
    table = data.get(key, {})
    if not isinstance(table, Mapping):
        raise ConfigurationError(f"{source}: [{key}] must be a table")
    return table


def _names(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{where} must be a list of strings")
    return list(value)
