-- Ledgerflow schema 0016: child workflows.
--
-- A child is started in its parent's transaction, beside the parent's CHILD step: the link
-- names the parent, the parent's run and the journal position that started it (so a child's
-- ending is delivered to that run's step, and a late one is kept as refused). A top-level
-- instance has no parent (all four NULL).
ALTER TABLE lf_instances ADD COLUMN parent_instance_id TEXT;
ALTER TABLE lf_instances ADD COLUMN parent_run INTEGER;
ALTER TABLE lf_instances ADD COLUMN parent_seq INTEGER;
-- What the parent's final ending does to it while it is live: 'cancel' (a durable cancel
-- request, written by that ending's own transaction), 'abandon' or 'wait'.
ALTER TABLE lf_instances ADD COLUMN on_parent_end TEXT;

-- A parent's children, both ways: the show command's links and a parent's ending reach them
-- through it; top-level instances (most) are not in it.
CREATE INDEX lf_instances_parent ON lf_instances (parent_instance_id)
WHERE parent_instance_id IS NOT NULL;
