-- A2A messages (app/a2a/messages.py).

-- name: keep_client_message_id
-- The client's messageId of the A2A message a coordinator task answers, kept in the
-- task's input, where the history's user message reads it (app/a2a/convert.py). An input
-- change is no transition (agent_tasks_transition fires on status, attempt and lease), and
-- a running attempt read its input when it started. $1 task, $2 messageId.
UPDATE agent_tasks
SET input = input || jsonb_build_object('a2a_message_id', $2::text)
WHERE task_id = $1
