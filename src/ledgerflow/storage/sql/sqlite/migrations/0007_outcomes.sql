-- Ledgerflow schema 0007: every ending says why, every request and event says what became of
-- it, and every failed attempt keeps its error.
--
-- cause: the failure (or request) that took the instance off its happy path, kept through
-- compensation to the end, so a COMPENSATED or parked instance still names what led to it.
-- cancel_outcome: what became of an accepted cancel request: honoured (the instance ended
-- CANCELLED) or overtaken (it ended otherwise first: a completion already on its way wins).
-- attempt_errors: a JSON array of the errors of failed attempts, oldest first, bounded.
-- lookup_failures: lookups of an UNKNOWN effect in a row that could not be asked at all (the
-- participant was unreachable); they are retried on the participant's lookup policy.

ALTER TABLE lf_instances ADD COLUMN cause TEXT;
ALTER TABLE lf_instances ADD COLUMN cancel_outcome TEXT;
ALTER TABLE lf_steps ADD COLUMN attempt_errors TEXT;
ALTER TABLE lf_effects ADD COLUMN attempt_errors TEXT;
ALTER TABLE lf_effects ADD COLUMN lookup_failures INTEGER NOT NULL DEFAULT 0;
