-- Agents: the callers of the API (hashed key, roles) and the agents Switchboard routes to
-- (url, timeouts, retries, fallback, intents, skills, card). One row serves both.
--
-- Every statement returns an agent as agent_shown (schema.sql) shows it: `enabled` as
-- routing sees it (coordination.sql), false when the admin switched the agent off (the
-- enabled column) or disabled it with DELETE (disabled_at, which also revokes its key), so
-- a deleted agent is never listed as enabled. A write returns the row it changed, shown
-- the same way: WITH changed AS (... RETURNING *) SELECT s.* FROM changed c, agent_shown(c) s.

-- name: insert_agent
-- Registers a new agent, or issues the first key of a seeded agent that has none yet.
-- No row back means the name is taken by an agent that already has a key.
-- $3 roles: a list replaces the agent's roles; NULL keeps a seeded agent's (none if new).
WITH changed AS (
    INSERT INTO agents (name, api_key_hash, roles, created_at, updated_at)
    VALUES ($1, $2, coalesce($3::text[], '{}'), $4, $4)
    ON CONFLICT (name) DO UPDATE
    SET api_key_hash = excluded.api_key_hash,
        roles = coalesce($3::text[], agents.roles),
        updated_at = excluded.updated_at
    WHERE agents.api_key_hash IS NULL
    RETURNING *
)
SELECT s.* FROM changed c, agent_shown(c) s

-- name: get_agent_by_name
SELECT s.* FROM agents a, agent_shown(a) s
WHERE a.name = $1

-- name: list_agents
-- Also what the coordinator routes by: every agent, and routing takes the enabled ones (an
-- agent disabled with DELETE /v1/agents/<name> shows enabled false until a new key; it stays
-- listed, so its breaker can still be managed).
SELECT s.* FROM agents a, agent_shown(a) s
ORDER BY s.name

-- name: find_active_agent_by_key_hash
SELECT agent_id, name, roles
FROM agents
WHERE api_key_hash = $1 AND disabled_at IS NULL

-- name: disable_agent
UPDATE agents
SET disabled_at = coalesce(disabled_at, $2), updated_at = $2
WHERE name = $1
RETURNING agent_id

-- name: replace_agent_key
-- A new key replaces the old one at once and re-enables a disabled agent.
WITH changed AS (
    UPDATE agents
    SET api_key_hash = $2, disabled_at = NULL, updated_at = $3
    WHERE name = $1
    RETURNING *
)
SELECT s.* FROM changed c, agent_shown(c) s

-- name: update_agent_settings
-- Every setting is written; the service merges the caller's changes into the current row.
-- $10 enabled: the column, only when the caller set it (NULL keeps it): what is shown also
-- reflects disabled_at, and writing that back would outlive a new key.
WITH changed AS (
    UPDATE agents
    SET roles = $2, description = $3, url = $4, timeout_ms = $5, retry_attempts = $6,
        fallback_strategy = $7, intents = $8, skills = $9, enabled = coalesce($10, enabled),
        fail_max = $11,
        reset_timeout_ms = $12, updated_at = $13
    WHERE name = $1
    RETURNING *
)
SELECT s.* FROM changed c, agent_shown(c) s

-- name: set_agent_card
-- A published card: its url, skills, description and A2A interface ($7, $8: NULL when it
-- declares none) route.
WITH changed AS (
    UPDATE agents
    SET card = $2, url = $3, skills = $4, description = $5, updated_at = $6, a2a_url = $7,
        a2a_protocol_version = $8, card_status = 'published', card_error = NULL,
        card_fetched_at = $6, card_checked_at = $6
    WHERE name = $1
    RETURNING *
)
SELECT s.* FROM changed c, agent_shown(c) s

-- name: store_discovered_card
-- A card fetched from the agent's /.well-known/agent-card.json: its skills, description
-- and A2A interface ($5, $6) route; url stays (where the card is fetched from).
WITH changed AS (
    UPDATE agents
    SET card = $2, skills = $3, description = $4, a2a_url = $5, a2a_protocol_version = $6,
        card_status = 'discovered', card_error = NULL, card_fetched_at = $7,
        card_checked_at = $7, updated_at = $7
    WHERE name = $1
    RETURNING *
)
SELECT s.* FROM changed c, agent_shown(c) s

-- name: mark_card_failure
-- The card could not be fetched ($2 'unreachable') or used ($2 'invalid'): the agent is
-- marked, and the card, skills and interface fetched before stay as they were.
WITH changed AS (
    UPDATE agents
    SET card_status = $2, card_error = $3, card_checked_at = $4
    WHERE name = $1
    RETURNING *
)
SELECT s.* FROM changed c, agent_shown(c) s

-- name: agents_to_refresh
-- What the agent_cards job fetches again: agents whose card came from discovery (or whose
-- discovery failed), enabled, with a url, not checked since $1; least recently checked
-- first. A handful of rows: no index.
SELECT s.* FROM agents a, agent_shown(a) s
WHERE a.card_status IN ('discovered', 'unreachable', 'invalid') AND a.url IS NOT NULL
  AND a.enabled AND a.disabled_at IS NULL
  AND (a.card_checked_at IS NULL OR a.card_checked_at < $1)
ORDER BY a.card_checked_at NULLS FIRST, a.name
LIMIT $2

-- name: get_agent_card
SELECT card FROM agents WHERE name = $1

-- name: fallback_strategy_names
SELECT name FROM fallback_strategies ORDER BY name

-- name: known_roles
-- The roles an agent may hold: every role a memory access level requires (data, so a
-- deployment that adds a level adds its role) and the roles the code checks itself ($1).
SELECT role
FROM (SELECT required_role AS role FROM memory_access_levels WHERE required_role IS NOT NULL
      UNION
      SELECT unnest($1::text[])) AS roles
ORDER BY role
