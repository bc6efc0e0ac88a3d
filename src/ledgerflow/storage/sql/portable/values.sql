-- Published values: the owner's write with its journal position, and the readers' reads
-- (ctx.publish; engine.read, engine.wait_published; show).

-- name: publish_value
-- Publish a value under a name: the first publication is version 1, each later one the next.
INSERT INTO lf_values (instance_id, name, value, version, run, seq, published_at)
VALUES (:instance_id, :name, :value, 1, :run, :seq, :now)
ON CONFLICT (instance_id, name) DO UPDATE
SET value = excluded.value, version = lf_values.version + 1, run = excluded.run,
    seq = excluded.seq, published_at = excluded.published_at;

-- name: select_value
-- The value last published under one name.
SELECT * FROM lf_values WHERE instance_id = :instance_id AND name = :name;

-- name: select_values
-- Every value an instance published, by name (bounded).
SELECT * FROM lf_values WHERE instance_id = :instance_id ORDER BY name LIMIT :limit;
