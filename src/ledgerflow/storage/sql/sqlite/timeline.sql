-- The timeline: the append-only record of every state change of an instance, written in the
-- same transaction as the change itself. (Events delivered to an instance are the inbox's.)

-- name: insert_timeline_entries
-- Many entries in one statement (a JSON array of objects shaped like insert_timeline_entry's
-- parameters), inserted in the array's order: the timeline entries of a whole group commit.
INSERT INTO lf_timeline (instance_id, at, generation, subject, from_state, to_state, detail)
SELECT json_extract(value, '$.instance_id'), json_extract(value, '$.now'),
       json_extract(value, '$.generation'), json_extract(value, '$.subject'),
       json_extract(value, '$.from_state'), json_extract(value, '$.to_state'),
       json_extract(value, '$.detail')
FROM json_each(:entries)
ORDER BY key;

-- name: select_timeline_page
-- One page of an instance's timeline, oldest first, after the entry the previous page ended
-- at.
SELECT * FROM lf_timeline
WHERE instance_id = :instance_id AND (:after_id IS NULL OR entry_id > :after_id)
ORDER BY entry_id
LIMIT :limit;
