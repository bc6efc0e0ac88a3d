-- The inbox: events delivered to instances, kept forever with what became of them.

-- name: insert_event_delivery
-- A new delivery; a repeated event id for the same instance changes nothing.
INSERT INTO lf_inbox (
    instance_id, event_id, name, payload, sender, for_seq, received_at, state, refusal, reason
) VALUES (
    :instance_id, :event_id, :name, :payload, :sender, :for_seq, :now, :state, :refusal,
    :reason
)
ON CONFLICT DO NOTHING;

-- name: get_delivery
SELECT * FROM lf_inbox WHERE instance_id = :instance_id AND event_id = :event_id;

-- name: select_pending_deliveries
-- What a wait may consume: pending events of one name, oldest first.
SELECT * FROM lf_inbox
WHERE instance_id = :instance_id AND name = :name AND state = 'PENDING'
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
WHERE instance_id = :instance_id AND name = :name AND state = 'PENDING';

-- name: wake_instance
-- A delivery makes a waiting instance due now. An instance held by a worker may be between
-- its read of the inbox and its next park: the arrival is noted, and that park makes it due.
UPDATE lf_instances
SET available_at = CASE WHEN status = 'WAITING' THEN min(available_at, :now)
                        ELSE available_at END,
    arrived_since_claim = 1
WHERE instance_id = :instance_id;

-- name: close_inbox
-- An instance that ends refuses the events no wait took: an event the caller was told was
-- accepted gets a recorded outcome it can read back, never stays pending for ever.
UPDATE lf_inbox
SET state = 'REJECTED', refusal = 'ended',
    reason = 'the instance ended ' || :status || ' before a wait took it'
WHERE instance_id = :instance_id AND state = 'PENDING';
