-- Ledgerflow schema 0003: durable, idempotent cancel requests.
--
-- A request is written by whoever asks (an API call, an operator), not by the owner, so it
-- lives in columns no owner's write touches; the owner reads it and cancels at a safe point.

ALTER TABLE lf_instances ADD COLUMN cancel_requested_at DOUBLE PRECISION;
ALTER TABLE lf_instances ADD COLUMN cancel_reason TEXT;
ALTER TABLE lf_instances ADD COLUMN cancel_compensate BIGINT;
