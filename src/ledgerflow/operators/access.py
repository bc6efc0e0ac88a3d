"""API tokens and console sessions: credentials in, a :class:`Principal` out (internal).

A token is ``lft_`` + a 12-character lookup id + ``_`` + a secret of 256 random bits, made for
a name no live token holds (the name is the principal) and that is not one Ledgerflow gives
its own principals (:func:`~ledgerflow.model.authority.reserved_principal`). It is printed
once, when it is made; the journal keeps only the secret's SHA-256 beside the id, so a
stolen journal (or a backup, or a log of its rows) yields no usable token. A request is
authenticated by finding the row by id and comparing hashes in constant time; an unknown id, a
wrong secret and a revoked token all get the same answer, so the answer says nothing about
which tokens exist.

A console sign-in turns a token into a session: the cookie carries a fresh random secret, the
journal its SHA-256, the token behind it and the CSRF token the session's forms must carry.
Every request re-reads the token, so revoking it ends its sessions at once.

Example::

    tokens = Tokens(store)
    secret, token = tokens.create(name="alice", role="operator", tenant="acme", created_by="root")
    principal = tokens.authenticate(secret)   # Principal(name="alice", role=OPERATOR, ...)
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from ledgerflow import limits
from ledgerflow.errors import (
    NotAuthenticatedError,
    PayloadError,
    ReservedNameError,
    TokenNameTakenError,
)
from ledgerflow.ledger.access import ApiToken, ConsoleSession
from ledgerflow.model import names
from ledgerflow.model.authority import (
    ACTOR_LENGTH_MAX,
    ALL_TENANTS,
    INSECURE_LOCAL,
    RESERVED_PREFIXES,
    ApiRole,
    Principal,
    reserved_principal,
)
from ledgerflow.operators import actions
from ledgerflow.runtime.clock import SYSTEM_CLOCK, Clock
from ledgerflow.storage.store import OperatorStore

__all__ = ["SignedIn", "Tokens"]

TOKEN_PREFIX = "lft_"
_TOKEN = re.compile(r"^lft_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$")
# Said for every credential that does not authenticate, whatever the reason.
_REFUSED = "the token is unknown or revoked"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedIn:
    """A console session: who it is, and the CSRF token its forms carry."""

    principal: Principal
    csrf_token: str


class Tokens:
    """Making, listing, revoking and checking API tokens, and the console's sessions."""

    def __init__(self, store: OperatorStore, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._store = store
        self._clock = clock

    def create(self, *, name: str, role: str, tenant: str, created_by: str) -> tuple[str, ApiToken]:
        """A new token (its text, shown only now, and its row); audited as ``token-create``."""
        checked_name = names.checked(name, what="token name", length_max=ACTOR_LENGTH_MAX)
        if reserved_principal(checked_name):
            raise ReservedNameError(
                f"a token may not be named {checked_name!r}: names starting with "
                f"{' or '.join(repr(p) for p in RESERVED_PREFIXES)}, and {INSECURE_LOCAL!r}, "
                "are the principals Ledgerflow names itself",
                name=checked_name,
            )
        try:
            api_role = ApiRole(role)
        except ValueError:
            known = ", ".join(r.value for r in ApiRole)
            raise PayloadError(f"unknown role {role!r}; roles are {known}") from None
        if tenant == ALL_TENANTS:
            if api_role is not ApiRole.ADMIN:
                raise PayloadError(f"only an admin token may see every tenant ({ALL_TENANTS!r})")
            scope = ALL_TENANTS
        else:
            scope = names.tenant(tenant)
        token_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        token = ApiToken(
            token_id=token_id,
            name=checked_name,
            role=api_role.value,
            tenant=scope,
            secret_hash=_digest(secret),
            created_at=self._clock.now(),
            created_by=created_by,
        )
        with self._store.transaction():
            holder = self._store.insert_token(token)
            if holder is not None:
                raise TokenNameTakenError(
                    f"a live token ({holder.token_id}, {holder.role}, tenant {holder.tenant}) "
                    f"acts as {checked_name!r} already: revoke it first to replace it "
                    "(ledgerflow tokens revoke), or choose another name",
                    name=checked_name,
                    token_id=holder.token_id,
                )
            self._audit(actions.TOKEN_CREATE, token, by=created_by)
        return f"{TOKEN_PREFIX}{token_id}_{secret}", token

    def list(self) -> list[ApiToken]:
        """Every token, revoked ones too, oldest first (never their secrets)."""
        return self._store.tokens()

    def revoke(self, token_id: str, *, revoked_by: str) -> ApiToken:
        """Revoke a token (and end its console sessions); revoking it again changes nothing."""
        token = self._store.get_token(token_id.removeprefix(TOKEN_PREFIX))
        if token is None:
            raise PayloadError(f"no token has the id {token_id!r} (ledgerflow tokens list)")
        with self._store.transaction():
            now = self._clock.now()
            if self._store.revoke_token(token.token_id, revoked_by=revoked_by, now=now):
                self._audit(actions.TOKEN_REVOKE, token, by=revoked_by)
        found = self._store.get_token(token.token_id)
        assert found is not None
        return found

    def authenticate(self, text: str | None) -> Principal:
        """The principal a token's text stands for, or :class:`NotAuthenticatedError`."""
        match = _TOKEN.match(text or "")
        if match is None:
            raise NotAuthenticatedError(_REFUSED)
        token = self._store.get_token(match.group(1))
        if (
            token is None
            or token.revoked_at is not None
            or not hmac.compare_digest(token.secret_hash, _digest(match.group(2)))
        ):
            raise NotAuthenticatedError(_REFUSED)
        return _principal(token)

    # -- console sessions --------------------------------------------------------------------

    def sign_in(self, text: str) -> tuple[str, SignedIn]:
        """A session for a valid token: the cookie's secret (to set now) and who signed in."""
        principal = self.authenticate(text)
        assert principal.token_id is not None
        cookie = secrets.token_urlsafe(32)
        now = self._clock.now()
        session = ConsoleSession(
            session_hash=_digest(cookie),
            token_id=principal.token_id,
            csrf_token=secrets.token_urlsafe(32),
            created_at=now,
            expires_at=now + limits.CONSOLE_SESSION_SECONDS,
        )
        self._store.insert_session(session)
        return cookie, SignedIn(principal=principal, csrf_token=session.csrf_token)

    def session(self, cookie: str | None) -> SignedIn:
        """Who a session cookie belongs to, while the session lasts and its token is live."""
        if not cookie:
            raise NotAuthenticatedError("not signed in")
        session = self._store.get_session(_digest(cookie), now=self._clock.now())
        token = self._store.get_token(session.token_id) if session else None
        if session is None or token is None or token.revoked_at is not None:
            raise NotAuthenticatedError("the session has ended; sign in again")
        return SignedIn(principal=_principal(token), csrf_token=session.csrf_token)

    def sign_out(self, cookie: str) -> None:
        self._store.delete_session(_digest(cookie))

    def _audit(self, kind: str, token: ApiToken, *, by: str) -> None:
        actions.record_action(
            self._store,
            self._clock,
            actor=by,
            role=None,
            kind=kind,
            instance_id=None,
            target=token.token_id,
            outcome="applied",
            reason=f"{kind} {token.name} ({token.role}, tenant {token.tenant})",
            arguments={"name": token.name, "role": token.role, "tenant": token.tenant},
        )


def _principal(token: ApiToken) -> Principal:
    return Principal(
        name=token.name, role=ApiRole(token.role), tenant=token.tenant, token_id=token.token_id
    )
