"""The one place request JSON is decoded, and the rule for values JSON allows but this
service cannot hold.

Every request body reaches a handler through ``JsonRequest.json`` (Litestar's body
extractor and the webhooks' idempotency hash both call it), and the ``contains`` query
parameter goes through ``decode_json`` too. The rule, applied once here rather than by
whichever serializer or column meets the value first:

- bytes that are not UTF-8 are malformed JSON (400), like any other syntax error;
- an integer outside the signed 64-bit range, or a number too large for a 64-bit float
  (``1e400``), is refused (422 naming the field and the bound): orjson cannot serialize the
  first, nothing here can represent the second, and PostgreSQL's bigint stops at the same
  bound;
- a NUL character (``\\u0000``) in a string or an object key is refused (422 naming the
  field): PostgreSQL's text and jsonb cannot store it;
- an object that names a member twice is refused (400): RFC 8259 leaves its meaning to the
  parser (most keep the last, some the first), so two readers of the same body, a proxy's
  signature check and this service say, could see different requests.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Request
from litestar.types import Empty

from app.errors import MalformedJson, TooDeeplyNested, ValidationFailed

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# More would only make the problem long; the client fixes the first ones and tries again.
MAX_REPORTED = 20

INTEGER_BOUND = f"an integer must lie between {INT64_MIN} and {INT64_MAX} (signed 64-bit)"
NUMBER_BOUND = "a number must be finite and at most 1.7976931348623157e308 in size (64-bit float)"
NUL_RULE = "holds the NUL character (\\u0000), which PostgreSQL cannot store"

_DECODER = msgspec.json.Decoder()

# Only a body with a run of 19 digits can hold an integer outside 64 bits (INT64_MAX has 19
# digits), and only one with the escape \u0000 a NUL (a raw NUL byte is a syntax error).
# Mapping digits to "0" and the rest to " " and searching for the run costs about 1 ms per
# MiB; walking the decoded value costs up to 13 ms per MiB of small numbers, so the walk
# runs only for a body that may need it.
_DIGITS_ONLY = bytes(ord("0") if 0x30 <= byte <= 0x39 else ord(" ") for byte in range(256))
_INT64_DIGITS = len(str(INT64_MAX))
_LONG_DIGIT_RUN = b"0" * _INT64_DIGITS
_NUL_ESCAPE = b"\\u0000"


@dataclass(frozen=True, slots=True)
class _OutOfRange:
    """A number the fallback decoder met that does not fit; ``integer`` says which kind."""

    text: str
    integer: bool


def decode_json(raw: bytes) -> Any:
    """Decode a JSON document, refusing what the service cannot hold (see the module doc).

    Raises ``MalformedJson`` (400) for bytes that are not JSON, ``TooDeeplyNested`` (400)
    for nesting the decoder cannot follow, ``ValidationFailed`` (422, ``errors`` naming each
    field as a dotted path, ``$`` for the whole document) for unstorable values."""
    try:
        value = _DECODER.decode(raw)
    except UnicodeDecodeError:
        raise _not_utf8(raw) from None
    except RecursionError:
        raise TooDeeplyNested("The JSON body is nested too deeply.") from None
    except msgspec.ValidationError as exc:
        # msgspec refuses a number it cannot represent ("Number out of range") without a
        # usable path; decode again, slowly, marking such numbers, to name their fields.
        value = _decode_marking_numbers(raw, str(exc))
        _refuse_unstorable(value)
        raise MalformedJson(f"The body is not valid JSON: {exc}.") from None
    except msgspec.DecodeError as exc:
        raise MalformedJson(f"The body is not valid JSON: {exc}.") from None
    if _LONG_DIGIT_RUN in raw.translate(_DIGITS_ONLY) or _NUL_ESCAPE in raw:
        _refuse_unstorable(value)
    if b"{" in raw:
        _refuse_duplicate_keys(raw)
    return value


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_members(pairs: list[tuple[str, Any]]) -> None:
    names = {name for name, _ in pairs}
    if len(names) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise _DuplicateKey(name)
            seen.add(name)


def _refuse_duplicate_keys(raw: bytes) -> None:
    """400 if an object of the (already decoded, so valid) document names a member twice.
    msgspec keeps the last silently; the standard library's decoder reports each object's
    members in order (about 4 µs for a typical body, 12 ms for a dense 1 MiB one)."""
    try:
        json.loads(raw, object_pairs_hook=_unique_members)
    except _DuplicateKey as duplicate:
        name = field_path((duplicate.key,))
        raise MalformedJson(
            f"The body names the member {name!r} twice in one object; each name may appear "
            "once (RFC 8259 leaves a repeated one's meaning to the reader).",
            errors=[{"field": name, "message": "appears twice in one object"}],
        ) from None


def unstorable_values(value: Any) -> list[dict[str, str]]:
    """``[{field, message}]`` for every value of a decoded document that breaks the rule,
    in document order, at most ``MAX_REPORTED``."""
    errors: list[dict[str, str]] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack and len(errors) < MAX_REPORTED:
        node, path = stack.pop()
        kind = type(node)
        if kind is dict:
            children = []
            for key, child in node.items():
                if "\x00" in key:
                    errors.append(_error((*path, key), f"the key {NUL_RULE}"))
                children.append((child, (*path, key)))
            stack.extend(reversed(children))
        elif kind is list:
            stack.extend((node[i], (*path, i)) for i in reversed(range(len(node))))
        elif kind is str:
            if "\x00" in node:
                errors.append(_error(path, NUL_RULE))
        elif kind is int:
            if not INT64_MIN <= node <= INT64_MAX:
                errors.append(_error(path, INTEGER_BOUND))
        elif kind is float:
            if not math.isfinite(node):
                errors.append(_error(path, NUMBER_BOUND))
        elif kind is _OutOfRange:
            errors.append(_error(path, INTEGER_BOUND if node.integer else NUMBER_BOUND))
    return errors


def field_path(path: tuple[str | int, ...]) -> str:
    """A path as the problems name fields: dotted keys and indices, ``$`` for the root."""
    return ".".join(str(part).replace("\x00", "\\u0000") for part in path) or "$"


def _error(path: tuple[str | int, ...], message: str) -> dict[str, str]:
    return {"field": field_path(path), "message": message}


def _refuse_unstorable(value: Any) -> None:
    errors = unstorable_values(value)
    if errors:
        raise ValidationFailed("The body holds values this service cannot store.", errors=errors)


def _not_utf8(raw: bytes) -> MalformedJson:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return MalformedJson(
            f"The body is not valid UTF-8 ({exc.reason} at byte {exc.start}); "
            "JSON is sent as UTF-8."
        )
    return MalformedJson("The body is not valid UTF-8; JSON is sent as UTF-8.")  # pragma: no cover


def fits_int64(digits: str) -> bool:
    """True if the decimal integer ``digits`` (an optional minus, then digits) lies in the
    signed 64-bit range. Counting digits first keeps int() away from thousands of them
    (CPython refuses to convert those)."""
    if len(digits) - digits.startswith("-") > _INT64_DIGITS:
        return False
    return INT64_MIN <= int(digits) <= INT64_MAX


def _parse_int(text: str) -> int | _OutOfRange:
    return int(text) if fits_int64(text) else _OutOfRange(text, integer=True)


def _parse_float(text: str) -> float | _OutOfRange:
    number = float(text)
    return number if math.isfinite(number) else _OutOfRange(text, integer=False)


def _not_a_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def _decode_marking_numbers(raw: bytes, reason: str) -> Any:
    """The document with numbers out of range replaced by markers (the standard library's
    decoder hands every number over as text); any other fault is malformed JSON."""
    try:
        return json.loads(
            raw.decode("utf-8"),
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_not_a_constant,
        )
    except UnicodeDecodeError:
        raise _not_utf8(raw) from None
    except RecursionError:
        raise TooDeeplyNested("The JSON body is nested too deeply.") from None
    except ValueError:
        raise MalformedJson(f"The body is not valid JSON: {reason}.") from None


class JsonRequest(Request[Any, Any, Any]):
    """Litestar's request, with its JSON body decoded by ``decode_json``."""

    async def json(self) -> Any:
        """The decoded body (``null`` when empty), decoded once per request."""
        if self._json is Empty:
            cached = self._connection_state.json
            if cached is Empty:
                cached = self._connection_state.json = decode_json(await self.body() or b"null")
            self._json = cached
        return self._json
