"""Names for the JSON whose shape is not Switchboard's to fix.

Everything Switchboard itself reads is typed (msgspec structs, pydantic models). What stays
untyped is JSON that a client, an agent or an operator shapes as they like, and that
Switchboard only bounds (depth, size), stores and hands back as written: a memory's
content, an agent's output_data, the keys agents add to a session's state, a published
agent card. These names say so where such a value is passed on.
"""

from __future__ import annotations

from typing import Any, TypeAlias

# Any JSON value, shaped by whoever wrote it.
JsonValue: TypeAlias = Any
# A JSON object whose members are shaped by whoever wrote it.
JsonObject: TypeAlias = dict[str, Any]
