-- Signals: the consistency signals metrics report as gauges (parked and flagged instances by
-- reason, UNKNOWN effects still open and the oldest of them). Every process that exports
-- metrics reads them from the journal, at a bounded rate, so every worker reports the same
-- values and none has to be "the one" that does.

-- name: count_parked_by_reason
SELECT coalesce(reason_code, 'unknown') AS reason, count(*) AS n FROM lf_instances
WHERE status = 'MANUAL_INTERVENTION'
GROUP BY coalesce(reason_code, 'unknown');

-- name: count_open_flags_by_reason
SELECT reason_code AS reason, count(*) AS n FROM lf_attention
WHERE cleared_at IS NULL
GROUP BY reason_code;

-- name: unknown_effects_open
-- Every effect in doubt, and the earliest last change among them (an UNKNOWN effect changes
-- only while its lookup cannot be asked, so this is when the oldest doubt was last looked at).
SELECT count(*) AS n, min(updated_at) AS oldest FROM lf_effects WHERE state = 'UNKNOWN';
