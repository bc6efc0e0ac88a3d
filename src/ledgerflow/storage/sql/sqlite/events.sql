-- Events: the append-only timeline of every state change, written in the same transaction as
-- the change itself.

-- name: insert_event
INSERT INTO lf_events (instance_id, at, generation, subject, from_state, to_state, detail)
VALUES (:instance_id, :now, :generation, :subject, :from_state, :to_state, :detail);

-- name: insert_events
-- Many events in one statement (a JSON array of objects shaped like insert_event's
-- parameters), inserted in the array's order: the timeline entries of a whole group commit.
INSERT INTO lf_events (instance_id, at, generation, subject, from_state, to_state, detail)
SELECT json_extract(value, '$.instance_id'), json_extract(value, '$.now'),
       json_extract(value, '$.generation'), json_extract(value, '$.subject'),
       json_extract(value, '$.from_state'), json_extract(value, '$.to_state'),
       json_extract(value, '$.detail')
FROM json_each(:events)
ORDER BY key;

-- name: select_events
SELECT * FROM lf_events WHERE instance_id = :instance_id ORDER BY event_id;
