-- The inbox: events delivered to instances, kept forever with what became of them.

-- name: wake_instance
-- A delivery makes a waiting instance due now. An instance held by a worker may be between
-- its read of the inbox and its next park: the arrival is noted, and that park makes it due.
-- A compensation waiting for its compensating child's ending is released until forever
-- (limits.WAIT_FOREVER_AT, runtime/child_compensations.py): woken the same way.
UPDATE lf_instances
SET available_at = CASE WHEN status = 'WAITING' THEN min(available_at, :now)
                        WHEN status IN ('COMPENSATING', 'CANCELLING') AND available_at >= 1e15
                        THEN :now
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

-- name: measure_inbox
-- What an instance's inbox holds that no wait has taken (pending and refused events, of every
-- run): how many, and their payloads' bytes. deliver checks the inbox bounds against it.
SELECT count(*) AS events, coalesce(sum(length(CAST(payload AS BLOB))), 0) AS bytes
FROM lf_inbox
WHERE instance_id = :instance_id AND state <> 'CONSUMED';

-- name: select_inbox_page
-- One page of an instance's inbox, oldest first, after the (received_at, event_id) position
-- the previous page ended at. A payload larger than :shown_max bytes is left out (its size is
-- given), so a page is small whatever its events carry.
SELECT instance_id, event_id, name, sender, for_seq, received_at, state, refusal, reason,
       consumed_seq, length(CAST(payload AS BLOB)) AS payload_bytes,
       CASE WHEN length(CAST(payload AS BLOB)) <= :shown_max THEN payload END AS payload
FROM lf_inbox
WHERE instance_id = :instance_id
  AND (:after_at IS NULL OR received_at > :after_at
       OR (received_at = :after_at AND event_id > :after_id))
ORDER BY received_at, event_id
LIMIT :limit;
