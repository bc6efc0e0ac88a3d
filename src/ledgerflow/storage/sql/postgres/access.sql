-- The perimeter: API tokens, console sessions and the answers an Idempotency-Key replays.

-- name: lock_tokens
-- Two creations of one name serialise here: the check below and the insert see each
-- other's commit. Readers (authentication) are not held up.
LOCK TABLE lf_api_tokens IN SHARE ROW EXCLUSIVE MODE;
