-- The timeline: the append-only record of every state change of an instance, written in the
-- same transaction as the change itself. (Events delivered to an instance are the inbox's.)

-- name: insert_timeline_entries
-- Many entries in one statement (a JSON array of objects shaped like insert_timeline_entry's
-- parameters), inserted in the array's order: the timeline entries of a whole group commit.
INSERT INTO lf_timeline (instance_id, at, generation, subject, from_state, to_state, detail)
SELECT e.instance_id, e.now, e.generation, e.subject, e.from_state, e.to_state, e.detail
FROM ROWS FROM (
    jsonb_to_recordset(CAST(:entries AS jsonb)) AS (
        instance_id text, now double precision, generation bigint, subject text,
        from_state text, to_state text, detail text
    )
) WITH ORDINALITY AS e(instance_id, now, generation, subject, from_state, to_state, detail, n)
ORDER BY e.n;

-- name: select_timeline_page
-- One page of an instance's timeline, oldest first, after the entry the previous page ended
-- at.
SELECT * FROM lf_timeline
WHERE instance_id = :instance_id AND (CAST(:after_id AS bigint) IS NULL OR entry_id > :after_id)
ORDER BY entry_id
LIMIT :limit;
