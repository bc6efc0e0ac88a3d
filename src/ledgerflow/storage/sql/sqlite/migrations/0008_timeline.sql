-- Ledgerflow schema 0008: the timeline is called the timeline.
--
-- lf_events held the ledger's own record of every state change, while "event" also names what
-- is delivered to an instance (lf_inbox.event_id, chosen by the sender). The table becomes
-- lf_timeline and its store-numbered key entry_id; rows, order and numbering are kept as they
-- are (AUTOINCREMENT's counter follows the renamed table).
--
-- SQLite renames a table and a column in place (the index follows both), but has no way to
-- rename an index: it is dropped and built again under its new name.

ALTER TABLE lf_events RENAME TO lf_timeline;
ALTER TABLE lf_timeline RENAME COLUMN event_id TO entry_id;
DROP INDEX lf_events_instance;
CREATE INDEX lf_timeline_instance ON lf_timeline (instance_id, entry_id);
