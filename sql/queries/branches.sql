-- Branches of a session (app/branches): a fork of the session's content at a version, with
-- versions of its own, merged back with the three-way merge of app/sessions/merge.py.
-- Every change of a branch bumps its version and writes one session_branch_versions row in
-- the same statement (session_branch_version in schema.sql makes the row). Times come from
-- the application clock ($n).

-- name: fork_branch
-- A new branch $3 of session $1 with the content of session version $2. No row back: the
-- session has no such version. $4 purpose, $5 owner, $6 created by, $7 now.
WITH source AS (
    SELECT * FROM session_state_versions WHERE session_id = $1 AND version = $2
), created AS (
    INSERT INTO session_branches (
        session_id, name, purpose, owner_agent, base_version, forked_at_version, version,
        session_state, agent_sequence, coordination_metadata, current_agent,
        progress_percentage, priority, created_by, created_at, updated_at, last_activity_at
    )
    SELECT $1, $3, $4, $5, s.version, s.version, s.version,
           s.session_state, s.agent_sequence, s.coordination_metadata, s.current_agent,
           s.progress_percentage, s.priority, $6, $7, $7, $7
    FROM source s
    RETURNING *
), recorded AS (
    INSERT INTO session_branch_versions
    SELECT v.* FROM created c,
        session_branch_version(c, $6, 'forked from main at version ' || c.base_version, $7,
                               NULL, c.base_version) v
)
SELECT * FROM created

-- name: list_branches
SELECT * FROM session_branches WHERE session_id = $1 ORDER BY created_at, name

-- name: get_branch
SELECT * FROM session_branches WHERE session_id = $1 AND name = $2

-- name: lock_branch
-- Serialises the writes, merges and rebases of one branch.
SELECT * FROM session_branches WHERE session_id = $1 AND name = $2 FOR UPDATE

-- name: update_branch_content
-- The branch's new content and its version row, if the branch is still open at version $3.
-- $10 now, $11 changed by, $12 reason, $13 the session version a rebase put the branch on
-- (NULL: unchanged), $14 the branch version an auto-merged write was based on (or NULL).
-- A coordinator's turn on the branch (app/coordination/target.py) comes with $15 its
-- decision as a coordination_decisions row in JSON, stored naming the branch, its
-- session_version the branch version written here; and $16 an event type and $17 its
-- payload (a task's end), given the branch_version and decision_id. NULL: none.
WITH updated AS (
    UPDATE session_branches
    SET session_state = $4,
        agent_sequence = $5,
        coordination_metadata = $6,
        current_agent = $7,
        progress_percentage = $8,
        priority = $9,
        version = version + 1,
        base_version = coalesce($13, base_version),
        updated_at = $10,
        last_activity_at = $10
    WHERE session_id = $1 AND name = $2 AND version = $3 AND state = 'open'
    RETURNING *
), recorded AS (
    INSERT INTO session_branch_versions
    SELECT v.* FROM updated u, session_branch_version(u, $11, $12, $10, $14, $13) v
), decided AS (
    -- The whole row from the record: the ids, the version and the time are this write's.
    INSERT INTO coordination_decisions
    SELECT (jsonb_populate_record(
        NULL::coordination_decisions,
        $15::jsonb || jsonb_build_object(
            'decision_id', uuid_generate_v7(), 'session_id', u.session_id,
            'session_version', u.version, 'branch', u.name, 'created_at', u.updated_at))).*
    FROM updated u
    WHERE $15::jsonb IS NOT NULL
    RETURNING decision_id
), told AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT $16::text,
           $17::jsonb || jsonb_build_object('branch_version', u.version,
                                            'decision_id', (SELECT decision_id FROM decided)),
           u.updated_at
    FROM updated u
    WHERE $16::text IS NOT NULL
)
SELECT updated.*, (SELECT decision_id FROM decided) AS decision_id FROM updated

-- name: mark_branch_merged
-- A merged branch takes no more writes; $3 the session version the merge wrote.
UPDATE session_branches
SET state = 'merged', merged_version = $3, updated_at = $4, last_activity_at = $4
WHERE session_id = $1 AND name = $2
RETURNING *

-- name: delete_branch
DELETE FROM session_branches WHERE session_id = $1 AND name = $2 RETURNING name

-- name: list_branch_versions
SELECT * FROM session_branch_versions
WHERE session_id = $1 AND branch = $2 AND version < $3
ORDER BY version DESC
LIMIT $4

-- name: get_branch_version
SELECT * FROM session_branch_versions WHERE session_id = $1 AND branch = $2 AND version = $3

-- name: session_graph_main
-- The session's versions as nodes of its graph (content left out), oldest first.
SELECT version, changed_by, change_reason, created_at, merge_base, merged_branch,
       merged_branch_version
FROM session_state_versions WHERE session_id = $1 ORDER BY version

-- name: session_graph_branches
-- Every branch version of the session as a node (content left out), by branch, oldest first.
SELECT branch, version, changed_by, change_reason, created_at, merge_base, parent_version
FROM session_branch_versions WHERE session_id = $1 ORDER BY branch, version

-- name: expire_idle_branches
-- Open branches quiet since before $1 go, with their versions (never one of a preserved
-- session: session_branch_idle). $2 batch size.
DELETE FROM session_branches b
WHERE (b.session_id, b.name) IN (
        SELECT x.session_id, x.name FROM session_branches x
        WHERE session_branch_idle(x, $1)
        ORDER BY x.last_activity_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
RETURNING b.name

-- name: count_idle_branches
SELECT count(*) FROM session_branches b WHERE session_branch_idle(b, $1)
