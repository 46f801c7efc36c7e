"""An A2A ``SendMessage`` to the completed task (a path of ``bench/run.py``'s HTTP list).

Raw JSON-RPC 2.0 over ``POST /a2a`` with ``A2A-Version: 1.0``, as the a2a-sdk client sends
it, from wrk: a message whose ``contextId`` is a session of its own, routed to the fast
local agent (``bench/fast_agent.py``) through its durable task; ``SendMessage`` waits for
the task, so the answer is the completed task. Each answer is counted: a completed task, a
task in another state, a Message (no agent task answered) or a JSON-RPC error.
"""

from __future__ import annotations

from pathlib import Path

from bench import wrk_scripts
from bench.message_task import TEXT

NAME = "POST /a2a SendMessage (fast agent, to the completed task)"
CLASSIFY = """
classify = function(status, headers, body)
  if status ~= 200 then return "status " .. status end
  if string.find(body, '"error":') then return "json-rpc error" end
  if string.find(body, 'TASK_STATE_COMPLETED', 1, true) then return "completed task" end
  if string.find(body, '"task":') then return "task not completed" end
  return "message"
end
"""


def script(sessions: list[str], directory: Path, key: str) -> Path:
    """wrk's script: SendMessage to a random session of ``sessions``, each answer counted."""
    return wrk_scripts.file(
        "a2a_send",
        wrk_scripts.lua_list("ids", sessions)
        + 'wrk.headers["A2A-Version"] = "1.0"\n'
        + "counter = 0\n"
        + "request = function()\n"
        + "  counter = counter + 1\n"
        + '  local id = "m" .. counter .. "-" .. math.random(1000000000)\n'
        + '  return wrk.format("POST", "/a2a", nil, \'{"jsonrpc": "2.0", "id": "\' .. id ..'
        + ' \'", "method": "SendMessage", "params": {"message": {"messageId": "\' .. id ..'
        + ' \'", "role": "ROLE_USER", "contextId": "\' .. ids[math.random(#ids)] ..'
        + f' \'", "parts": [{{"text": "{TEXT}"}}]}}}}}}\')\n'
        + "end\n"
        + wrk_scripts.counting(CLASSIFY),
        directory,
        key,
    )
