"""Reading an agent's answer body: strict JSON first, else repaired with json-repair.

Agents are often LLM workflows, and an LLM's JSON arrives cut off (the token budget ran
out mid-string), with a trailing comma, in single quotes, or inside a markdown fence. Such
an answer is repaired (the seed's "LLM response recovery") and the decision records that
it was; one that cannot be repaired into an object is a malformed answer, as before.

Valid JSON never reaches json-repair: strict decoding is the fast path, unchanged. A
repaired document passes the same rule as every JSON body (``decode_json``: no NUL, no
integer past 64 bits, no member named twice), so a repair cannot smuggle in what a strict
answer could not carry. json-repair is pure Python and grows faster than linearly on
hostile input (measured: about 0.2 s for 64 KiB of an unclosed string followed by commas,
1.5 s for 256 KiB), so only an answer up to ``max_bytes`` is tried, and the caller runs it
off the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import json_repair
import msgspec
import orjson

from app.common.jsonbody import decode_json
from app.common.jsontypes import JsonObject
from app.errors import BadRequest, ValidationFailed

# What was wrong with an answer that was repaired: cut off before its end, or broken
# before it (a trailing comma, single quotes, a markdown fence, prose around it).
RepairKind = Literal["truncated", "malformed"]

# msgspec's message for input that ends inside a value.
_TRUNCATED = "Input data was truncated"


@dataclass(frozen=True, slots=True)
class RepairedAnswer:
    """An answer body that was not JSON, repaired into an object."""

    value: JsonObject
    kind: RepairKind


def repair_answer(raw: bytes, max_bytes: int) -> RepairedAnswer | None:
    """``raw`` repaired into a JSON object, or None: it is longer than ``max_bytes``, it
    was valid JSON refused for another reason (repair would not change that), it is not
    UTF-8, or no object can be made of it."""
    if len(raw) > max_bytes:
        return None
    try:
        msgspec.json.decode(raw)
    except msgspec.ValidationError:
        return None  # valid JSON with a number out of range: not a syntax problem
    except msgspec.DecodeError as exc:
        kind: RepairKind = "truncated" if str(exc) == _TRUNCATED else "malformed"
    except RecursionError:
        return None
    else:
        return None  # valid JSON (a member named twice, say): not repaired
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    try:
        value = json_repair.loads(text, skip_json_loads=True)
    # Untrusted input into a parser that is not ours: whatever it raises (a RecursionError
    # turned ValueError on deep nesting, a bug on input nobody tried) means "not
    # repairable", never an error of the request that called the agent.
    except Exception:
        return None
    if not isinstance(value, dict):
        return None  # garbage repairs to "" or a bare value: not an answer
    try:
        document = decode_json(orjson.dumps(value))
    except (orjson.JSONEncodeError, BadRequest, ValidationFailed):
        return None
    if not isinstance(document, dict):
        return None
    return RepairedAnswer(document, kind)
