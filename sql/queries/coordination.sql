-- Coordination: intent rules, fallback content, breakers, decisions.

-- name: intent_rules
-- Everything the intent engine needs, in one round trip.
SELECT
    (SELECT coalesce(jsonb_object_agg(name, base_weight), '{}') FROM intent_types) AS weights,
    (SELECT coalesce(jsonb_object_agg(intent, phrases), '{}') FROM (
        SELECT intent, jsonb_agg(phrase ORDER BY phrase) AS phrases
        FROM intent_keywords GROUP BY intent) k) AS keywords,
    (SELECT coalesce(jsonb_object_agg(name, points), '{}') FROM intent_modifiers) AS modifiers,
    (SELECT coalesce(jsonb_object_agg(modifier, phrases), '{}') FROM (
        SELECT modifier, jsonb_agg(phrase ORDER BY phrase) AS phrases
        FROM intent_modifier_cues GROUP BY modifier) c) AS cues

-- name: list_intent_types
SELECT t.name, t.base_weight, t.description, t.updated_at,
       coalesce(array_agg(k.phrase ORDER BY k.phrase) FILTER (WHERE k.phrase IS NOT NULL), '{}')
           AS keywords
FROM intent_types t
LEFT JOIN intent_keywords k ON k.intent = t.name
GROUP BY t.name
ORDER BY t.base_weight DESC, t.name

-- name: upsert_intent_type
INSERT INTO intent_types (name, base_weight, description, updated_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE
SET base_weight = excluded.base_weight, description = excluded.description,
    updated_at = excluded.updated_at

-- name: delete_intent_keywords
DELETE FROM intent_keywords WHERE intent = $1

-- name: insert_intent_keywords
INSERT INTO intent_keywords (intent, phrase)
SELECT $1, unnest($2::text[])

-- name: list_intent_modifiers
SELECT m.name, m.points, m.description,
       coalesce(array_agg(c.phrase ORDER BY c.phrase) FILTER (WHERE c.phrase IS NOT NULL), '{}')
           AS cues
FROM intent_modifiers m
LEFT JOIN intent_modifier_cues c ON c.modifier = m.name
GROUP BY m.name
ORDER BY m.points DESC, m.name

-- name: update_intent_modifier
UPDATE intent_modifiers SET points = $2, description = $3 WHERE name = $1 RETURNING name

-- name: delete_modifier_cues
DELETE FROM intent_modifier_cues WHERE modifier = $1

-- name: insert_modifier_cues
INSERT INTO intent_modifier_cues (modifier, phrase)
SELECT $1, unnest($2::text[])

-- name: fallback_templates
SELECT name, template FROM fallback_strategies

-- name: educational_content
SELECT topic, title, keywords, body FROM educational_content ORDER BY topic

-- name: list_breakers
SELECT agent_name, state, failure_count, opened_at, version, updated_by, updated_at
FROM agent_breakers

-- name: save_breaker
-- Publish a breaker's new state to the other replicas: stored and NOTIFYed together. A
-- change of state (not of the failure count alone) is also an event, breaker.changed
-- (`before` reads the row as it was: every part of one statement sees the same snapshot).
WITH before AS (
    SELECT state FROM agent_breakers WHERE agent_name = $1
), saved AS (
    INSERT INTO agent_breakers (agent_name, state, failure_count, opened_at, updated_by, updated_at)
    VALUES ($1, $2, $3, $4, $5, $6)
    ON CONFLICT (agent_name) DO UPDATE
    SET state = excluded.state, failure_count = excluded.failure_count,
        opened_at = excluded.opened_at, updated_by = excluded.updated_by,
        updated_at = excluded.updated_at, version = agent_breakers.version + 1
    RETURNING agent_name, state, failure_count, opened_at, version, updated_by
), told AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT 'breaker.changed',
           jsonb_build_object('agent_name', saved.agent_name,
                              'from_state', (SELECT state FROM before), 'state', saved.state,
                              'failure_count', saved.failure_count, 'version', saved.version,
                              'updated_by', saved.updated_by),
           $6::timestamptz
    FROM saved
    WHERE saved.state IS DISTINCT FROM (SELECT state FROM before)
)
SELECT pg_notify('switchboard_breakers', json_build_object(
           'agent_name', agent_name, 'state', state, 'failure_count', failure_count,
           'opened_at', opened_at, 'version', version, 'updated_by', updated_by)::text),
       version
FROM saved

-- name: list_decisions
SELECT * FROM coordination_decisions
WHERE session_id = $1 AND (created_at, decision_id) < ($2, $3)
ORDER BY created_at DESC, decision_id DESC
LIMIT $4

-- name: next_step_rules
SELECT position, name, event, condition, outcome, description
FROM next_step_rules ORDER BY position

-- name: next_step_counters
-- What the next-step decision counts (app/coordination/next_step.py), read from the
-- session's decisions and versions since a person last resolved it: $1 the session, $2 and
-- $3 the step (intent, agent) of the event, $4 now. Durable data only, so every replica
-- counts the same. The one-row CTEs are MATERIALIZED: inlined, a join against one of them
-- re-ran its aggregate for every turn (quadratic: 1 s at 5,000 turns).
WITH since AS MATERIALIZED (
    SELECT coalesce(max(created_at), '-infinity'::timestamptz) AS at
    FROM coordination_decisions WHERE session_id = $1 AND outcome = 'resolved'
), turns AS MATERIALIZED (
    SELECT d.outcome, d.primary_intent, d.chosen_agent, d.error, d.response, d.next_step,
           d.created_at
    FROM coordination_decisions d, since
    WHERE d.session_id = $1 AND d.outcome IN ('agent', 'fallback') AND d.created_at > since.at
), answered AS MATERIALIZED (
    SELECT coalesce(max(created_at), '-infinity'::timestamptz) AS at
    FROM turns WHERE outcome = 'agent'
), step_answered AS MATERIALIZED (
    SELECT coalesce(max(created_at), '-infinity'::timestamptz) AS at
    FROM turns
    WHERE outcome = 'agent' AND primary_intent IS NOT DISTINCT FROM $2
      AND chosen_agent IS NOT DISTINCT FROM $3
), progressed AS MATERIALIZED (
    -- The progress last rose at the latest version whose progress is above its previous one.
    SELECT greatest(
        (SELECT max(v.created_at) FROM (
            SELECT created_at, progress_percentage,
                   lag(progress_percentage) OVER (ORDER BY version) AS before
            FROM session_state_versions WHERE session_id = $1) v
         WHERE v.progress_percentage > v.before),
        (SELECT at FROM since),
        (SELECT created_at FROM session_coordination WHERE session_id = $1)) AS at
)
SELECT
    (SELECT count(*) FROM turns, answered
     WHERE turns.outcome = 'fallback' AND turns.created_at > answered.at)::integer
        AS consecutive_fallbacks,
    (SELECT count(*) FROM turns, step_answered
     WHERE turns.outcome = 'fallback' AND turns.created_at > step_answered.at
       AND turns.primary_intent IS NOT DISTINCT FROM $2
       AND turns.chosen_agent IS NOT DISTINCT FROM $3)::integer AS step_failures,
    ((SELECT count(*) FROM turns, progressed
      WHERE turns.created_at > progressed.at
        AND (turns.next_step ->> 'outcome' = 'hand_off'
             OR jsonb_typeof(turns.response -> 'routed_to') = 'object'))
     + (SELECT count(*) FROM session_state_versions v, progressed
        WHERE v.session_id = $1 AND v.created_at > progressed.at
          AND v.change_reason LIKE 'handoff to %'))::integer AS handoffs,
    greatest(0, floor(extract(epoch FROM $4::timestamptz - (SELECT at FROM progressed))))::integer
        AS seconds_without_progress,
    -- The latest resolution counted from (NULL: none): an escalation decided with these
    -- counters is acted on only if no resolution came since (escalate_session).
    (SELECT max(created_at) FROM coordination_decisions
     WHERE session_id = $1 AND outcome = 'resolved') AS resolved_at,
    (SELECT coalesce(array_agg(e.error ORDER BY e.created_at DESC), ARRAY[]::text[])
     FROM (SELECT error, created_at FROM turns WHERE error IS NOT NULL
           ORDER BY created_at DESC LIMIT 5) e) AS last_errors

-- name: resolve_session
-- A person resolved an escalated session: active again (a new version by $2 at $4, its
-- expiry pushed to at least $4 + $7), the decision that records the resolution (outcome
-- 'resolved', message $3 the note, $5 the escalation it ends in response.output_data,
-- $6 the trace) and the event session.resolved, in one statement. No row: the session is
-- not escalated (or does not exist).
WITH resolved AS (
    UPDATE session_coordination s
    SET status = 'active', version = s.version + 1, updated_at = $4, last_activity_at = $4,
        expires_at = greatest(s.expires_at, $4::timestamptz + $7::interval),
        expiry_warned_at = NULL
    WHERE s.session_id = $1 AND s.status = 'escalated'
    RETURNING s.*
), recorded AS (
    INSERT INTO session_state_versions
    SELECT v.* FROM resolved r, session_version(r, $2, 'resolved: ' || $3, $4) v
), decided AS (
    INSERT INTO coordination_decisions (
        session_id, session_version, message, classifier, intents, outcome, degraded,
        response, execution_time_ms, created_by, created_at, trace_id, next_step)
    SELECT r.session_id, r.version, $3, 'next_step', '[]', 'resolved', false,
           jsonb_build_object('text', $3, 'output_data', $5::jsonb,
                              'next_agent_suggestions', '[]'::jsonb),
           0, $2, $4, $6,
           jsonb_build_object('outcome', 'continue', 'rule', 'resolved',
                              'reason', 'a person resolved the escalation: processing resumes',
                              'inputs', jsonb_build_object('event', 'resolved',
                                                           'escalation', $5::jsonb))
    FROM resolved r
    RETURNING decision_id, session_version
), told AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT 'session.resolved',
           jsonb_build_object('session_id', $1, 'session_version', d.session_version,
                              'decision_id', d.decision_id, 'note', $3, 'resolved_by', $2,
                              'escalation', $5::jsonb),
           $4
    FROM decided d
)
SELECT r.*, d.decision_id FROM resolved r, decided d

-- name: latest_escalation
-- The decision that escalated the session last (what a resolution ends): the first
-- escalated one after the last resolution, never the one a person resolved before, nor a
-- failure recorded while the session already waited (session_escalate).
SELECT e.decision_id, e.message, e.response -> 'output_data' AS context, e.created_at
FROM coordination_decisions e
WHERE e.session_id = $1 AND e.outcome = 'escalated'
  AND NOT EXISTS (SELECT 1 FROM coordination_decisions r
                  WHERE r.session_id = $1 AND r.outcome = 'resolved'
                    AND (r.created_at, r.decision_id) > (e.created_at, e.decision_id))
ORDER BY e.created_at, e.decision_id
LIMIT 1

-- name: escalate_session
-- session_escalate in schema.sql: $1 session, $2 actor, $3 why, $4 context, $5 the
-- next-step decision, $6 now, $7 trace, $8 task. The decision's id, or NULL (no row):
-- also when a person resolved the session after $9, the latest resolution the decision's
-- counters were read from (NULL: none), since that resolution started the counters again.
-- Run with the session row locked (lock_session): a resolution has committed (and is seen
-- here) or waits.
SELECT session_escalate($1, $2, $3, $4, $5, $6, $7, $8)
WHERE NOT EXISTS (
    SELECT 1 FROM coordination_decisions
    WHERE session_id = $1 AND outcome = 'resolved'
      AND created_at > coalesce($9::timestamptz, '-infinity'::timestamptz))
