-- Events: the append-only timeline of every state change, written in the same transaction as
-- the change itself.

-- name: insert_event
INSERT INTO lf_events (instance_id, at, generation, subject, from_state, to_state, detail)
VALUES (:instance_id, :now, :generation, :subject, :from_state, :to_state, :detail);

-- name: insert_events
-- Many events in one statement (a JSON array of objects shaped like insert_event's
-- parameters), inserted in the array's order: the timeline entries of a whole group commit.
INSERT INTO lf_events (instance_id, at, generation, subject, from_state, to_state, detail)
SELECT e.instance_id, e.now, e.generation, e.subject, e.from_state, e.to_state, e.detail
FROM ROWS FROM (
    jsonb_to_recordset(CAST(:events AS jsonb)) AS (
        instance_id text, now double precision, generation bigint, subject text,
        from_state text, to_state text, detail text
    )
) WITH ORDINALITY AS e(instance_id, now, generation, subject, from_state, to_state, detail, n)
ORDER BY e.n;

-- name: select_events
SELECT * FROM lf_events WHERE instance_id = :instance_id ORDER BY event_id;
