-- Flow control on effects: limits, each flow key's GCRA and each attempt's admission.

-- name: set_effect_limit
-- A change at run time keeps the declaration last applied (declared): the code's declaration
-- is applied again only once it changes.
INSERT INTO lf_limits (scope, in_flight_max, rate_per_second, burst, per, fair_by, weights)
VALUES (:scope, :in_flight_max, :rate_per_second, :burst, :per, :fair_by, :weights)
ON CONFLICT (scope) DO UPDATE SET in_flight_max = excluded.in_flight_max,
    rate_per_second = excluded.rate_per_second, burst = excluded.burst, per = excluded.per,
    fair_by = excluded.fair_by, weights = excluded.weights;

-- name: set_declared_limit
UPDATE lf_limits SET declared = :declared WHERE scope = :scope;

-- name: select_effect_limits
SELECT scope, in_flight_max, rate_per_second, burst, per, fair_by, weights, declared
FROM lf_limits WHERE substr(scope, 1, 7) = 'effect:' ORDER BY scope;

-- name: select_effect_limit
SELECT scope, in_flight_max, rate_per_second, burst, per, fair_by, weights, declared
FROM lf_limits WHERE scope = :scope;

-- name: flow_instance
SELECT owner, generation FROM lf_instances WHERE instance_id = :instance_id;

-- name: ensure_flow_key
INSERT INTO lf_flow_keys (scope, flow_key, tat, queue_tat, vtime)
VALUES (:scope, :flow_key, 0, 0, 0)
ON CONFLICT (scope, flow_key) DO NOTHING;

-- name: update_flow_key
UPDATE lf_flow_keys SET tat = :tat, queue_tat = :queue_tat, vtime = :vtime
WHERE scope = :scope AND flow_key = :flow_key;

-- name: shift_flow_slots
-- A newcomer that comes before waiters holding slots took the first of theirs: theirs move
-- one interval later (each reads its slot again when it asks).
UPDATE lf_flow_admissions SET slot = slot + :interval
WHERE scope = :scope AND flow_key = :flow_key AND state = 'THROTTLED'
  AND slot IS NOT NULL AND slot >= :from_slot;

-- name: select_flow_fair
SELECT finish FROM lf_flow_fair
WHERE scope = :scope AND flow_key = :flow_key AND fairness_key = :fairness_key;

-- name: set_flow_fair
INSERT INTO lf_flow_fair (scope, flow_key, fairness_key, finish)
VALUES (:scope, :flow_key, :fairness_key, :finish)
ON CONFLICT (scope, flow_key, fairness_key) DO UPDATE SET finish = excluded.finish;

-- name: prune_flow_fair
DELETE FROM lf_flow_fair WHERE scope = :scope AND flow_key = :flow_key AND finish <= :vtime;

-- name: select_flow_waiters
SELECT effect_id, attempt, priority, tag, throttled_since, retry_at, slot, fairness_key
FROM lf_flow_admissions
WHERE scope = :scope AND flow_key = :flow_key AND state = 'THROTTLED';

-- name: settle_flow_admissions
-- An admitted attempt whose outcome is recorded (the effect left INTENDED at that attempt)
-- is in flight no more: marked so, it is not counted again.
UPDATE lf_flow_admissions SET state = 'SETTLED'
WHERE scope = :scope AND flow_key = :flow_key AND state = 'ADMITTED'
  AND NOT EXISTS (
      SELECT 1 FROM lf_effects e
      WHERE e.effect_id = lf_flow_admissions.effect_id
        AND e.attempt = lf_flow_admissions.attempt AND e.state = 'INTENDED');

-- name: count_flow_in_flight
SELECT count(*) AS n FROM lf_flow_admissions
WHERE scope = :scope AND flow_key = :flow_key AND state = 'ADMITTED';

-- name: select_flow_admission
SELECT * FROM lf_flow_admissions WHERE effect_id = :effect_id AND attempt = :attempt;

-- name: upsert_flow_admission
INSERT INTO lf_flow_admissions (
    effect_id, attempt, instance_id, scope, flow_key, state, reason, slot, throttled_since,
    retry_at, admitted_at, throttled_seconds, concurrency_max, rate_per_second, burst,
    priority, fairness_key, tag, weight, passed_over)
VALUES (
    :effect_id, :attempt, :instance_id, :scope, :flow_key, :state, :reason, :slot,
    :throttled_since, :retry_at, :admitted_at, :throttled_seconds, :concurrency_max,
    :rate_per_second, :burst, :priority, :fairness_key, :tag, :weight, :passed_over)
ON CONFLICT (effect_id, attempt) DO UPDATE SET
    scope = excluded.scope, flow_key = excluded.flow_key, state = excluded.state,
    reason = excluded.reason, slot = excluded.slot, retry_at = excluded.retry_at,
    admitted_at = excluded.admitted_at, throttled_seconds = excluded.throttled_seconds,
    concurrency_max = excluded.concurrency_max, rate_per_second = excluded.rate_per_second,
    burst = excluded.burst, priority = excluded.priority, tag = excluded.tag,
    fairness_key = excluded.fairness_key, weight = excluded.weight,
    passed_over = excluded.passed_over;

-- name: select_flow_admissions
-- An admitted attempt whose outcome is recorded since shows as SETTLED, marked or not yet.
SELECT a.effect_id, a.attempt, a.instance_id, a.scope, a.flow_key,
    CASE WHEN a.state = 'ADMITTED' AND NOT EXISTS (
        SELECT 1 FROM lf_effects e
        WHERE e.effect_id = a.effect_id AND e.attempt = a.attempt AND e.state = 'INTENDED')
    THEN 'SETTLED' ELSE a.state END AS state,
    a.reason, a.slot, a.throttled_since, a.retry_at, a.admitted_at, a.throttled_seconds,
    a.concurrency_max, a.rate_per_second, a.burst, a.priority, a.fairness_key, a.tag, a.weight,
    a.passed_over
FROM lf_flow_admissions a
WHERE (CAST(:scope AS TEXT) IS NULL OR a.scope = :scope)
  AND (CAST(:state AS TEXT) IS NULL OR a.state = :state)
ORDER BY a.scope, a.flow_key, coalesce(a.admitted_at, a.throttled_since), a.effect_id, a.attempt
LIMIT :limit;
