-- Schedules: their rows, their specs by version, and one row per decided slot.

-- name: select_schedules
SELECT * FROM lf_schedules ORDER BY name;

-- name: select_schedule
SELECT * FROM lf_schedules WHERE name = :name;

-- name: insert_schedule
-- A schedule declared for the first time: it starts at its first slot after the declaration.
INSERT INTO lf_schedules (name, tenant, spec, spec_version, cursor, updated_at)
VALUES (:name, :tenant, :spec, 1, :cursor, :now)
ON CONFLICT (name) DO NOTHING;

-- name: change_schedule_spec
-- A changed spec is the next version, in force from now: the cursor moves to its first slot
-- after now, and a buffered slot of the old spec still fires. The same spec changes nothing,
-- and a deleted schedule stays deleted.
UPDATE lf_schedules
SET spec = :spec, tenant = :tenant, spec_version = spec_version + 1, cursor = :cursor,
    updated_at = :now
WHERE name = :name AND spec <> :spec AND deleted = 0;

-- name: keep_schedule_spec
-- The spec in force kept under its version, from when it was in force.
INSERT INTO lf_schedule_specs (name, spec_version, spec, in_force_from)
SELECT name, spec_version, spec, :now FROM lf_schedules WHERE name = :name
ON CONFLICT DO NOTHING;

-- name: advance_schedule
-- A tick: only if the cursor and the buffered slot are still what it was planned against
-- (one tick of two planned at once changes a row; the other's transaction rolls back).
UPDATE lf_schedules
SET cursor = :cursor, buffered_at = :buffered_at, buffered_version = :buffered_version,
    last_instance_id = :last_instance_id, updated_at = :now
WHERE name = :name AND cursor = :expected_cursor
  AND coalesce(buffered_at, -1.0) = coalesce(CAST(:expected_buffered_at AS DOUBLE PRECISION), -1.0);

-- name: insert_slot
-- One decided slot; its key refuses a second decision of the same slot.
INSERT INTO lf_schedule_slots (
    name, nominal_at, spec_version, outcome, reason, instance_id, decided_at, lateness
) VALUES (
    :name, :nominal_at, :spec_version, :outcome, :reason, :instance_id, :decided_at, :lateness
);

-- name: insert_slot_unless_decided
-- A backfilled slot, unless its slot was decided already (a backfill run twice adds nothing).
INSERT INTO lf_schedule_slots (
    name, nominal_at, spec_version, outcome, reason, instance_id, decided_at, lateness
) VALUES (
    :name, :nominal_at, :spec_version, :outcome, :reason, :instance_id, :decided_at, :lateness
)
ON CONFLICT DO NOTHING;

-- name: fire_buffered_slot
-- The buffered slot fires once the overlap ends: its row moves from BUFFERED to FIRED, once.
UPDATE lf_schedule_slots
SET outcome = 'FIRED', reason = :reason, instance_id = :instance_id, decided_at = :decided_at,
    lateness = :lateness
WHERE name = :name AND nominal_at = :nominal_at AND outcome = 'BUFFERED';

-- name: set_schedule_paused
UPDATE lf_schedules SET paused = :paused, updated_at = :now
WHERE name = :name AND paused <> :paused AND deleted = 0;

-- name: delete_schedule
-- A deleted schedule fires nothing more; its row and its slots stay on the record.
UPDATE lf_schedules SET deleted = 1, updated_at = :now WHERE name = :name AND deleted = 0;

-- name: select_slots
-- The latest :limit decided slots of a schedule, newest first.
SELECT * FROM lf_schedule_slots WHERE name = :name ORDER BY nominal_at DESC LIMIT :limit;

-- name: select_schedule_specs
SELECT * FROM lf_schedule_specs WHERE name = :name ORDER BY spec_version;

-- name: select_buffered_slots
-- The slots a schedule holds BUFFERED, oldest first (the schedule's row names the oldest).
SELECT nominal_at, spec_version FROM lf_schedule_slots
WHERE name = :name AND outcome = 'BUFFERED'
ORDER BY nominal_at
LIMIT :limit;

-- name: note_schedule_trigger
-- A manual trigger's instance becomes the schedule's run the overlap policy sees, unless the
-- run it sees now has not ended (the final statuses of ledgerflow.model.instance): a trigger
-- never hides a running slot's instance.
UPDATE lf_schedules SET last_instance_id = :instance_id, updated_at = :now
WHERE name = :name AND deleted = 0
  AND (last_instance_id IS NULL OR NOT EXISTS (
      SELECT 1 FROM lf_instances i
      WHERE i.instance_id = lf_schedules.last_instance_id
        AND i.status NOT IN ('SUCCEEDED', 'COMPENSATED', 'FAILED', 'CANCELLED')));
