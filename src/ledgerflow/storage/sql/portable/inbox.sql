-- The inbox: events delivered to instances, kept forever with what became of them.

-- name: insert_event_delivery
-- A new delivery; a repeated event id for the same instance changes nothing (in any run: the
-- key is the instance's). It is filed under the instance's open run.
INSERT INTO lf_inbox (
    instance_id, event_id, name, payload, sender, for_seq, received_at, state, refusal, reason,
    run
) VALUES (
    :instance_id, :event_id, :name, :payload, :sender, :for_seq, :now, :state, :refusal,
    :reason, (SELECT run FROM lf_instances WHERE instance_id = :instance_id)
)
ON CONFLICT DO NOTHING;

-- name: get_delivery
SELECT * FROM lf_inbox WHERE instance_id = :instance_id AND event_id = :event_id;

-- name: select_pending_deliveries
-- What a wait may consume: pending events of one name filed under the open run (a switch to
-- the next run moves them there), oldest first.
SELECT * FROM lf_inbox
WHERE instance_id = :instance_id AND name = :name AND state = 'PENDING'
  AND run = (SELECT run FROM lf_instances WHERE instance_id = :instance_id)
ORDER BY received_at, event_id;

-- name: select_inbox
SELECT * FROM lf_inbox WHERE instance_id = :instance_id ORDER BY received_at, event_id;

-- name: consume_delivery
-- Conditional on the event still being pending: one event answers one wait, once.
UPDATE lf_inbox
SET state = 'CONSUMED', consumed_seq = :seq, consumed_generation = :generation
WHERE instance_id = :instance_id AND event_id = :event_id AND state = 'PENDING';

-- name: reject_delivery
UPDATE lf_inbox SET state = 'REJECTED', refusal = 'not-approver', reason = :reason
WHERE instance_id = :instance_id AND event_id = :event_id AND state = 'PENDING';

-- name: count_pending_deliveries
SELECT count(*) AS n FROM lf_inbox
WHERE instance_id = :instance_id AND name = :name AND state = 'PENDING'
  AND run = (SELECT run FROM lf_instances WHERE instance_id = :instance_id);

-- name: count_inbox_refusal
-- An event refused because the inbox was full: counted (one row per instance), never kept.
INSERT INTO lf_inbox_refusals (
    instance_id, refused, first_at, last_at, last_event_id, last_name, last_sender
) VALUES (:instance_id, 1, :now, :now, :event_id, :name, :sender)
ON CONFLICT (instance_id) DO UPDATE SET
    refused = lf_inbox_refusals.refused + 1,
    last_at = excluded.last_at,
    last_event_id = excluded.last_event_id,
    last_name = excluded.last_name,
    last_sender = excluded.last_sender;

-- name: get_inbox_refusals
SELECT * FROM lf_inbox_refusals WHERE instance_id = :instance_id;
