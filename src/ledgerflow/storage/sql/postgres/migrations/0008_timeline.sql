-- Ledgerflow schema 0008: the timeline is called the timeline.
--
-- lf_events held the ledger's own record of every state change, while "event" also names what
-- is delivered to an instance (lf_inbox.event_id, chosen by the sender). The table becomes
-- lf_timeline and its store-numbered key entry_id; rows, order and numbering are kept as they
-- are. The primary key, the foreign key, the lookup index and the identity's sequence take the
-- new name too, so nothing in the schema still says lf_events.

ALTER TABLE lf_events RENAME TO lf_timeline;
ALTER TABLE lf_timeline RENAME COLUMN event_id TO entry_id;
ALTER INDEX lf_events_pkey RENAME TO lf_timeline_pkey;
ALTER TABLE lf_timeline RENAME CONSTRAINT lf_events_instance_id_fkey TO lf_timeline_instance_id_fkey;
ALTER INDEX lf_events_instance RENAME TO lf_timeline_instance;
ALTER SEQUENCE lf_events_event_id_seq RENAME TO lf_timeline_entry_id_seq;
