"""The message path end to end through a durable task with a fast local agent (a path of
``bench/run.py``'s HTTP list).

``POST /v1/sessions/{id}/messages`` routed to Make_Plan_Agent, registered with the URL of
``bench/fast_agent.py`` (its own process on CPU 1, answering at once). The message runs the
coordinator, submits the agent's task (the INSERT leased to the process that took the
message, its transition row and event), the task's attempt calls the agent, its completion
is committed (transition row, event, announcement) and the request's wait reads it, then the
answer is applied to the session: all of it inside the measured request, since the default
(no ``Prefer: respond-async``) is the synchronous wait, a 200 with the agent's answer. A
message past the agent's concurrency limit (SWITCHBOARD_TASKS_AGENT_CONCURRENCY_DEFAULT,
10) queues and is claimed by the worker. Each answer is counted by what it was: answered by
the agent through its task, or degraded (the wait ran out and the fallback answered).
"""

from __future__ import annotations

from pathlib import Path

import asyncpg

from bench import wrk_scripts

NAME = "POST /v1/sessions/{id}/messages (fast agent, durable task)"
AGENT = "Make_Plan_Agent"
TEXT = "Please make a plan for my savings"
CLASSIFY = """
classify = function(status, headers, body)
  if status ~= 200 then return "status " .. status end
  if string.find(body, '"degraded":%s*true') then return "degraded" end
  if string.find(body, '"agent":%s*"Make_Plan_Agent"') and not string.find(body, '"task_id":%s*null') then
    return "agent answered"
  end
  return "other"
end
"""


async def sessions_of_their_own(conn: asyncpg.Connection, count: int) -> list[str]:
    """``count`` new sessions of new users (one each): a path that grows its sessions gets
    sessions no other path reads or writes."""
    rows = await conn.fetch(
        """WITH u AS (INSERT INTO users (id) SELECT uuid_generate_v7() FROM generate_series(1, $1)
                      RETURNING id)
           INSERT INTO session_coordination (user_id, expires_at)
           SELECT id, now() + interval '30 days' FROM u RETURNING session_id""",
        count,
    )
    return [str(r[0]) for r in rows]


def script(sessions: list[str], directory: Path, key: str) -> Path:
    """wrk's script: a message to a random session of ``sessions``, each answer counted."""
    return wrk_scripts.file(
        "message_task",
        wrk_scripts.lua_list("ids", sessions)
        + 'request = function() return wrk.format("POST", "/v1/sessions/" .. ids[math.random(#ids)]'
        + f' .. "/messages", nil, \'{{"text": "{TEXT}"}}\') end\n'
        + wrk_scripts.counting(CLASSIFY),
        directory,
        key,
    )
