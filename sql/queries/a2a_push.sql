-- A2A push notification configs (app/a2a/push.py). Each config has a delivery target in
-- subscriptions (push_config_id, task_id) that the outbox fan-out gives its task's
-- task.transition events; deleting the config deletes it and its pending deliveries.

-- name: insert_push_config
-- A config and its delivery target, in one statement; NULL when the task already has a
-- config of that id. $1 task, $2 config id, $3 url, $4 token, $5 authentication,
-- $6 created by, $7 secret (the target's signing secret), $8 now.
WITH config AS (
    INSERT INTO a2a_push_configs (task_id, config_id, url, token, authentication, created_by,
                                  created_at)
    VALUES ($1, $2, $3, $4, $5, $6, $8)
    ON CONFLICT (task_id, config_id) DO NOTHING
    RETURNING push_config_id, task_id, config_id, url, token, authentication, created_by,
              created_at
), target AS (
    INSERT INTO subscriptions (url, event_types, secret, created_at, push_config_id, task_id)
    SELECT url, ARRAY['task.transition'], $7, $8, push_config_id, task_id FROM config
)
SELECT task_id, config_id, url, token, authentication, created_by FROM config

-- name: push_configs_of_task
-- A task's configs, oldest first; $2 the caller (NULL: every caller's, for the admin).
SELECT task_id, config_id, url, token, authentication, created_by
FROM a2a_push_configs
WHERE task_id = $1 AND ($2::text IS NULL OR created_by = $2)
ORDER BY created_at, config_id

-- name: delete_push_config
-- $3 the caller (NULL: any, for the admin). Its delivery target and pending deliveries go
-- with it (ON DELETE CASCADE).
DELETE FROM a2a_push_configs
WHERE task_id = $1 AND config_id = $2 AND ($3::text IS NULL OR created_by = $3)
RETURNING config_id
