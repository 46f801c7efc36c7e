-- Job runs: the exactly-once slot claims, each run's progress and record, and the runs'
-- own retention (housekeeping).

-- name: claim_run
-- Claim a job's slot. A second claimer gets no row, unless the first claim is still
-- 'running' past its lease (its process died): then the slot is taken over.
INSERT INTO job_runs (job_name, slot_start, trigger, dry_run, status, claimed_by, started_at,
                      lease_expires_at)
VALUES ($1, $2, $3, $4, 'running', $5, $6, $7)
ON CONFLICT (job_name, slot_start) DO UPDATE
SET claimed_by = excluded.claimed_by,
    started_at = excluded.started_at,
    lease_expires_at = excluded.lease_expires_at,
    attempts = job_runs.attempts + 1,
    error = NULL
WHERE job_runs.status = 'running' AND job_runs.lease_expires_at < excluded.started_at
RETURNING run_id, attempts

-- name: record_progress
-- In the same transaction as a batch: what it did, and a longer lease.
UPDATE job_runs
SET rows_affected = rows_affected + $2,
    details = $3,
    lease_expires_at = $4
WHERE run_id = $1 AND claimed_by = $5

-- name: finish_run
UPDATE job_runs
SET status = $2, finished_at = $3, error = $4, details = $5
WHERE run_id = $1 AND claimed_by = $6
RETURNING *

-- name: list_runs
SELECT * FROM job_runs
WHERE job_name = $1 AND (started_at, run_id) < ($2, $3)
ORDER BY started_at DESC, run_id DESC
LIMIT $4

-- name: last_runs
SELECT DISTINCT ON (job_name) * FROM job_runs
ORDER BY job_name, started_at DESC, run_id DESC

-- name: purge_job_runs
-- Finished runs older than their retention (their slots are long past, so no replica will
-- try to claim them again); a running claim is never removed. Picked by ctid without
-- locking first, like the other purges. $1 started before, $2 batch size.
DELETE FROM job_runs r
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM job_runs x WHERE job_run_lapsed(x, $1) ORDER BY started_at LIMIT $2))
  AND job_run_lapsed(r, $1)
RETURNING run_id

-- name: count_purgeable_job_runs
SELECT count(*) FROM job_runs r WHERE job_run_lapsed(r, $1)
