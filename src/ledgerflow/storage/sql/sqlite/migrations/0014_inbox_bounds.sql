-- Ledgerflow schema 0014: the events refused because an instance's inbox was full.
--
-- An event past an instance's inbox bounds (limits.INBOX_EVENTS_MAX, INBOX_BYTES_MAX) is not
-- kept: it is counted here, one row per instance however many are refused, with the first and
-- the latest refusal and what the latest was (its id, name and sender; never its payload), so
-- the evidence of a signaller's flood stays bounded too.
CREATE TABLE lf_inbox_refusals (
    instance_id   TEXT PRIMARY KEY REFERENCES lf_instances (instance_id),
    refused       INTEGER NOT NULL,
    first_at      REAL NOT NULL,
    last_at       REAL NOT NULL,
    last_event_id TEXT NOT NULL,
    last_name     TEXT NOT NULL,
    last_sender   TEXT
);

-- An instance's inbox a page at a time, oldest first (the API's and the console's pages read
-- it in this order and stop at the page's end).
CREATE INDEX lf_inbox_received ON lf_inbox (instance_id, received_at, event_id);
