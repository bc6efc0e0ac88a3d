-- Durable locks: holders, queues and the listing (ctx.lock; ledgerflow locks).

-- name: insert_lock_holder
-- Make an instance the holder of a lock nobody holds; changes no row when another instance
-- holds it. An instance asking again for a lock it holds (its code caught a defect that left
-- the block holding it) takes it over at the new position: a lock is never waited for by its
-- own holder.
INSERT INTO lf_locks (name, tenant, holder_instance, holder_run, holder_seq, granted_at)
VALUES (:name, :tenant, :instance_id, :run, :seq, :now)
ON CONFLICT (name, tenant) DO UPDATE
SET holder_run = excluded.holder_run, holder_seq = excluded.holder_seq,
    granted_at = excluded.granted_at
WHERE lf_locks.holder_instance = excluded.holder_instance;

-- name: enqueue_lock_waiter
-- Put an instance at the end of a lock's queue.
INSERT INTO lf_lock_waiters (name, tenant, instance_id, run, seq, enqueued_at)
VALUES (:name, :tenant, :instance_id, :run, :seq, :now);

-- name: delete_lock_holder
-- Give up a lock, only as the acquisition that holds it (run and position): a repeat, or a
-- lock held by someone else since, changes nothing.
DELETE FROM lf_locks
WHERE name = :name AND tenant = :tenant AND holder_instance = :instance_id
  AND holder_run = :run AND holder_seq = :seq;

-- name: first_lock_waiter
-- The waiter a released lock goes to: the earliest queued.
SELECT * FROM lf_lock_waiters
WHERE name = :name AND tenant = :tenant
ORDER BY position
LIMIT 1;

-- name: delete_lock_waiter
-- Take one waiter out of its queue (its turn came, or it gave up at its timeout).
DELETE FROM lf_lock_waiters WHERE instance_id = :instance_id AND run = :run AND seq = :seq;

-- name: held_locks
-- The locks an instance holds and the queues it is in (its final ending releases and leaves
-- them), in one read: an ending that touched no lock pays one round trip, not two.
SELECT 'held' AS what, name, tenant, holder_run, holder_seq
FROM lf_locks WHERE holder_instance = :instance_id
UNION ALL
SELECT 'queued' AS what, name, tenant, run AS holder_run, seq AS holder_seq
FROM lf_lock_waiters WHERE instance_id = :instance_id
ORDER BY what, name, tenant;

-- name: delete_instance_waiters
-- An ending instance leaves every queue it is in.
DELETE FROM lf_lock_waiters WHERE instance_id = :instance_id;

-- name: select_locks
-- Every held lock (of one tenant, when given), with its holder's status, by name.
SELECT l.*, i.status AS holder_status FROM lf_locks l
JOIN lf_instances i ON i.instance_id = l.holder_instance
WHERE (CAST(:tenant AS text) IS NULL OR l.tenant = :tenant)
ORDER BY l.name, l.tenant
LIMIT :limit;

-- name: select_lock_waiters
-- Every queued waiter (of one tenant, when given), with its status, in each queue's order.
SELECT w.*, i.status AS status FROM lf_lock_waiters w
JOIN lf_instances i ON i.instance_id = w.instance_id
WHERE (CAST(:tenant AS text) IS NULL OR w.tenant = :tenant)
ORDER BY w.name, w.tenant, w.position
LIMIT :limit;

-- name: lock_holder
-- Who holds a lock (the wait-for graph's first hop).
SELECT holder_instance FROM lf_locks WHERE name = :name AND tenant = :tenant;

-- name: lock_waited_for
-- The lock an instance is queued for and its holder (an instance waits for one at a time; a
-- lock nobody holds has a NULL holder).
SELECT w.name, l.holder_instance FROM lf_lock_waiters w
LEFT JOIN lf_locks l ON l.name = w.name AND l.tenant = w.tenant
WHERE w.instance_id = :instance_id
ORDER BY w.position
LIMIT 1;
