-- Agents: the callers of the API, each with a hashed key and a set of roles.

-- name: insert_agent
-- No row back means the name is taken.
INSERT INTO agents (name, api_key_hash, roles, created_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO NOTHING
RETURNING agent_id, name, roles, created_at, disabled_at

-- name: get_agent_by_name
SELECT agent_id, name, roles, created_at, disabled_at
FROM agents
WHERE name = $1

-- name: list_agents
SELECT agent_id, name, roles, created_at, disabled_at
FROM agents
ORDER BY name

-- name: find_active_agent_by_key_hash
SELECT agent_id, name, roles, created_at, disabled_at
FROM agents
WHERE api_key_hash = $1 AND disabled_at IS NULL

-- name: disable_agent
UPDATE agents
SET disabled_at = coalesce(disabled_at, $2)
WHERE name = $1
RETURNING agent_id, name, roles, created_at, disabled_at

-- name: replace_agent_key
-- A new key replaces the old one at once and re-enables a disabled agent.
UPDATE agents
SET api_key_hash = $2, disabled_at = NULL
WHERE name = $1
RETURNING agent_id, name, roles, created_at, disabled_at
