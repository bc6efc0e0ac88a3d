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
SET available_at = CASE WHEN status = 'WAITING' THEN LEAST(available_at, :now)
                        ELSE available_at END,
    arrived_since_claim = 1
WHERE instance_id = :instance_id;

-- name: close_inbox
-- An instance that ends refuses the events no wait took: an event the caller was told was
-- accepted gets a recorded outcome it can read back, never stays pending for ever.
UPDATE lf_inbox
SET state = 'REJECTED', refusal = 'ended',
    reason = 'the instance ended ' || CAST(:status AS text) || ' before a wait took it'
WHERE instance_id = :instance_id AND state = 'PENDING';

-- name: measure_inbox
-- What an instance's inbox holds that no wait has taken (pending and refused events, of every
-- run): how many, and their payloads' bytes. deliver checks the inbox bounds against it.
SELECT count(*) AS events, coalesce(sum(octet_length(payload)), 0) AS bytes
FROM lf_inbox
WHERE instance_id = :instance_id AND state <> 'CONSUMED';

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

-- name: select_inbox_page
-- One page of an instance's inbox, oldest first, after the (received_at, event_id) position
-- the previous page ended at. A payload larger than :shown_max bytes is left out (its size is
-- given), so a page is small whatever its events carry.
SELECT instance_id, event_id, name, sender, for_seq, received_at, state, refusal, reason,
       consumed_seq, octet_length(payload) AS payload_bytes,
       CASE WHEN octet_length(payload) <= :shown_max THEN payload END AS payload
FROM lf_inbox
WHERE instance_id = :instance_id
  AND (CAST(:after_at AS double precision) IS NULL OR received_at > :after_at
       OR (received_at = :after_at AND event_id > CAST(:after_id AS text)))
ORDER BY received_at, event_id
LIMIT :limit;
