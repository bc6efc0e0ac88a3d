-- Ledgerflow schema 0024: an index that serves the claim in its own order (issue 29).
--
-- The claim (select_claimable) takes the earliest due runnable instances, ORDER BY
-- available_at, instance_id. lf_instances_runnable (status, available_at) leads with the
-- status, so five statuses' ranges had to be read and sorted together: every claim read every
-- due runnable row, and its cost grew with the backlog. This partial index holds only runnable
-- instances, in the claim's order, so a claim reads the first rows it can take and stops. Its
-- WHERE is the claim's status test word for word (the planners match a partial index by it).
CREATE INDEX lf_instances_claimable ON lf_instances (available_at, instance_id)
    WHERE status IN ('SCHEDULED', 'RUNNING', 'WAITING', 'COMPENSATING', 'CANCELLING');
