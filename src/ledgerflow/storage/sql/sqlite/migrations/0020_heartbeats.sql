-- Ledgerflow schema 0020: effect heartbeats (@participant.effect(heartbeat_timeout=...)).
--
-- An effect declared with a heartbeat timeout writes a heartbeat when it is dispatched and then
-- whenever its code calls `await call.heartbeat(details)` (throttled): each is a conditional
-- update of the effect's row fenced on (effect, attempt, owner generation). heartbeat_due_at
-- is when the attempt counts as cut off (the store's clock): past it, with the effect still
-- INTENDED at that attempt and the heartbeat written by the instance's current generation, a
-- claim may take the instance over from its owner before the owner's lease runs out, and the
-- recovery makes the outcome UNKNOWN. The details stay with the effect across attempts: the
-- next attempt reads the last durable ones.
ALTER TABLE lf_effects ADD COLUMN heartbeat_at REAL;
ALTER TABLE lf_effects ADD COLUMN heartbeat_due_at REAL;
ALTER TABLE lf_effects ADD COLUMN heartbeat_attempt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE lf_effects ADD COLUMN heartbeat_generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE lf_effects ADD COLUMN heartbeat_details TEXT;
-- The claim's look for cut-off attempts reads only effects with a heartbeat deadline.
CREATE INDEX lf_effects_heartbeat_due ON lf_effects (heartbeat_due_at)
    WHERE heartbeat_due_at IS NOT NULL;
