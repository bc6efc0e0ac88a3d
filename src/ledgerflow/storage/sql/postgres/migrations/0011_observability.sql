-- Ledgerflow schema 0011: what an on-call engineer needs from the journal (issue 18):

-- The traceback of a step's latest failed attempt, bounded (its last lines: see
-- limits.TRACEBACK_CHARS_MAX), beside the error it explains; `ledgerflow show` prints it.
ALTER TABLE lf_steps ADD COLUMN error_traceback TEXT;

-- The W3C trace context (traceparent, and tracestate if any) of the instance's run span, so
-- that a worker resuming the instance, any worker, continues the same trace.
ALTER TABLE lf_instances ADD COLUMN trace_context TEXT;

-- The metrics' gauges count the UNKNOWN effects and find the oldest at every read: a partial
-- index keeps that read to the effects in doubt, however long the journal.
CREATE INDEX lf_effects_unknown ON lf_effects (updated_at) WHERE state = 'UNKNOWN';
