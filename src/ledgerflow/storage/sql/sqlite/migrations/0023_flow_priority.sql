-- Ledgerflow schema 0023: priority and weighted fairness on effect limits, and limits declared
-- in code (issue 27).
--
-- An effect limit may share its flow key fairly between fairness keys (fair_by: 'tenant' or
-- 'input.<path>'), each with its weight (weights: a JSON object, a key not in it weighs 1).
-- declared is the declaration in code last applied to the row (its JSON; NULL: the limit was
-- only ever set at run time): an engine applies a declaration again only when it differs.
ALTER TABLE lf_limits ADD COLUMN fair_by TEXT;
ALTER TABLE lf_limits ADD COLUMN weights TEXT;
ALTER TABLE lf_limits ADD COLUMN declared TEXT;

-- Each flow key's virtual time: the fairness tag of its latest admission.
ALTER TABLE lf_flow_keys ADD COLUMN vtime REAL NOT NULL DEFAULT 0;

-- Each fairness key's finish tag under one flow key: where its next waiter's tag starts. A row
-- behind the flow key's virtual time says nothing more and is deleted.
CREATE TABLE lf_flow_fair (
    scope        TEXT NOT NULL,
    flow_key     TEXT NOT NULL,
    fairness_key TEXT NOT NULL,
    finish       REAL NOT NULL,
    PRIMARY KEY (scope, flow_key, fairness_key)
);

-- An attempt's priority (1 lowest to 5 highest), fairness key, its tag and that key's weight,
-- and how many waiters before it in order were passed over when it was admitted (their
-- workers silent too long: the oracle's order checks allow those admissions).
ALTER TABLE lf_flow_admissions ADD COLUMN priority INTEGER NOT NULL DEFAULT 3;
ALTER TABLE lf_flow_admissions ADD COLUMN fairness_key TEXT NOT NULL DEFAULT '*';
ALTER TABLE lf_flow_admissions ADD COLUMN tag REAL;
ALTER TABLE lf_flow_admissions ADD COLUMN weight REAL NOT NULL DEFAULT 1;
ALTER TABLE lf_flow_admissions ADD COLUMN passed_over INTEGER NOT NULL DEFAULT 0;
