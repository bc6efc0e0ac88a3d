"""The perimeter part of the SQL store: API tokens, console sessions and idempotent answers
(internal).

Each call is one short transaction. Purges are bounded (``ACCESS_PURGE_BATCH``) so that no
request pays for sweeping a backlog; the rows they leave behind are swept by the next ones.
"""

from __future__ import annotations

from ledgerflow.ledger.access import ApiToken, ConsoleSession, IdempotencyRecord
from ledgerflow.storage.rows import fields, record_from_row
from ledgerflow.storage.sql_seam import SqlSeam

# Rows one purge deletes at most (expired sessions, idempotency records past retention).
ACCESS_PURGE_BATCH = 100


class AccessStore(SqlSeam):
    # -- tokens ------------------------------------------------------------------------------

    def insert_token(self, token: ApiToken) -> ApiToken | None:
        """Insert a token unless a live one holds its name: return that one then (nothing is
        inserted). The check and the insert are one transaction that no other token's insert
        can interleave with (PostgreSQL locks the table against writers for it)."""
        with self._write_transaction():
            self._run("lock_tokens", {})
            rows, _ = self._run("live_token_named", {"name": token.name})
            if rows:
                return record_from_row(ApiToken, rows[0])
            self._run("insert_token", fields(token))
        return None

    def get_token(self, token_id: str) -> ApiToken | None:
        with self._read():
            rows, _ = self._run("get_token", {"token_id": token_id})
        return record_from_row(ApiToken, rows[0]) if rows else None

    def tokens(self) -> list[ApiToken]:
        with self._read():
            rows, _ = self._run("select_tokens", {})
        return [record_from_row(ApiToken, r) for r in rows]

    def revoke_token(self, token_id: str, *, revoked_by: str, now: float) -> bool:
        """Revoke a live token and end its console sessions; False when none was live."""
        with self._write_transaction():
            _, changed = self._run(
                "revoke_token", {"token_id": token_id, "revoked_by": revoked_by, "now": now}
            )
            self._run("end_token_sessions", {"token_id": token_id})
        return changed == 1

    # -- console sessions --------------------------------------------------------------------

    def insert_session(self, session: ConsoleSession) -> None:
        with self._write_transaction():
            self._run("purge_sessions", {"now": session.created_at, "limit": ACCESS_PURGE_BATCH})
            self._run("insert_session", fields(session))

    def get_session(self, session_hash: str, *, now: float) -> ConsoleSession | None:
        with self._read():
            rows, _ = self._run("get_session", {"session_hash": session_hash, "now": now})
        return record_from_row(ConsoleSession, rows[0]) if rows else None

    def delete_session(self, session_hash: str) -> None:
        with self._write_transaction():
            self._run("delete_session", {"session_hash": session_hash})

    # -- idempotent answers ------------------------------------------------------------------

    def reserve_idempotency(
        self,
        *,
        scope: str,
        key: str,
        request_hash: str,
        now: float,
        cutoff: float,
        abandoned_before: float,
    ) -> IdempotencyRecord | None:
        """Claim ``key`` for this request at ``now`` (None), or return the record that holds
        it already (an answer to replay, or a request still being answered). Records older
        than ``cutoff`` are past retention: swept first, so a key past it is free again. A
        claim of this same request that was never answered and was made before
        ``abandoned_before`` is taken over (None): its request died with its server."""
        where = {"scope": scope, "idempotency_key": key}
        with self._write_transaction():
            self._run("purge_idempotency", {"cutoff": cutoff, "limit": ACCESS_PURGE_BATCH})
            _, inserted = self._run(
                "reserve_idempotency", {**where, "request_hash": request_hash, "now": now}
            )
            if inserted == 1:
                return None
            rows, _ = self._run("get_idempotency", where)
            held = record_from_row(IdempotencyRecord, rows[0]) if rows else None
            if held is not None and held.status == 0 and held.created_at < abandoned_before:
                _, taken = self._run(
                    "take_over_idempotency",
                    {
                        **where,
                        "request_hash": request_hash,
                        "claimed_at": held.created_at,
                        "abandoned_before": abandoned_before,
                        "now": now,
                    },
                )
                if taken == 1:
                    return None
        return held

    def finish_idempotency(
        self, *, scope: str, key: str, claimed_at: float, status: int, body: str
    ) -> bool:
        """Keep the answer of the claim made at ``claimed_at``; False when that claim no
        longer holds the key (it was taken over)."""
        with self._write_transaction():
            _, changed = self._run(
                "finish_idempotency",
                {
                    "scope": scope,
                    "idempotency_key": key,
                    "claimed_at": claimed_at,
                    "status": status,
                    "body": body,
                },
            )
        return changed == 1

    def release_idempotency(self, *, scope: str, key: str, claimed_at: float) -> None:
        with self._write_transaction():
            self._run(
                "release_idempotency",
                {"scope": scope, "idempotency_key": key, "claimed_at": claimed_at},
            )
