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
