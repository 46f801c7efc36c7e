"""Auto-merged writes under contention (a path of ``bench/run.py``'s HTTP list).

wrk's connections PATCH a few sessions of their own with ``Prefer: merge=auto``, each write
setting one of a few keys of ``session_state.agent_outputs``, with ``If-Match`` the newest
version wrk has seen of that session: the writes in flight on the same session make most
of them stale, and the server merges them three-way with what was written since their base.
Two writes that set the same key since the base conflict (409, problem+json naming the
key). Each answer is counted: merged (200, ``Preference-Applied: merge=auto``), written
plainly (200, the base was still current) or a conflict (409, after which wrk bases the
session's next write on the 409's ``current_version``, as a client would); wrk's error
column counts the 409s too, since they are not 2xx.
"""

from __future__ import annotations

from pathlib import Path

from bench import wrk_scripts

NAME = "PATCH /v1/sessions/{id} (stale, Prefer: merge=auto)"
SESSIONS = 8  # writers per session: wrk's connections / 8 (2 at 16, 8 at 64)
KEYS = 16  # the keys written: two stale writes of one key conflict
CLASSIFY = """
seen = function(id, version)
  if id and version and version > (versions[id] or 1) then versions[id] = version end
end
classify = function(status, headers, body)
  if status == 409 then
    -- as a client would: the next write to that session is based on its current version
    seen(string.match(body, '"instance":%s*"/v1/sessions/([^"/]+)"'),
         tonumber(string.match(body, '"current_version":%s*(%d+)')))
    return "conflict (409)"
  end
  if status ~= 200 then return "status " .. status end
  local etag = headers["etag"] or headers["ETag"]
  seen(string.match(body, '"session_id":%s*"([^"]+)"'), etag and tonumber(string.match(etag, "%d+")))
  if headers["preference-applied"] or headers["Preference-Applied"] then return "merged" end
  return "written plainly"
end
"""


def script(sessions: list[str], directory: Path, key: str) -> Path:
    """wrk's script: a stale merge=auto write to a random one of ``sessions``, counted."""
    return wrk_scripts.file(
        "auto_merge",
        wrk_scripts.lua_list("ids", sessions)
        + "versions = {}\n"
        + 'wrk.headers["Prefer"] = "merge=auto"\n'
        + "request = function()\n"
        + "  local id = ids[math.random(#ids)]\n"
        + "  wrk.headers[\"If-Match\"] = '\"' .. (versions[id] or 1) .. '\"'\n"
        + '  return wrk.format("PATCH", "/v1/sessions/" .. id, nil,'
        + ' \'{"session_state": {"agent_outputs": {"a\' .. math.random('
        + str(KEYS)
        + ") .. '\": ' .. math.random(1000000) .. '}}}')\n"
        + "end\n"
        + wrk_scripts.counting(CLASSIFY),
        directory,
        key,
    )
