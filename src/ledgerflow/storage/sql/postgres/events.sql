-- Events: the append-only timeline of every state change, written in the same transaction as
-- the change itself.

-- name: insert_event
INSERT INTO lf_events (instance_id, at, generation, subject, from_state, to_state, detail)
VALUES (:instance_id, :now, :generation, :subject, :from_state, :to_state, :detail);

-- name: select_events
SELECT * FROM lf_events WHERE instance_id = :instance_id ORDER BY event_id;
