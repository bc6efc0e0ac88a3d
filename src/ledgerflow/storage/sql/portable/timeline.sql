-- The timeline: the append-only record of every state change of an instance, written in the
-- same transaction as the change itself. (Events delivered to an instance are the inbox's.)

-- name: insert_timeline_entry
INSERT INTO lf_timeline (instance_id, at, generation, subject, from_state, to_state, detail)
VALUES (:instance_id, :now, :generation, :subject, :from_state, :to_state, :detail);

-- name: select_timeline
SELECT * FROM lf_timeline WHERE instance_id = :instance_id ORDER BY entry_id;
