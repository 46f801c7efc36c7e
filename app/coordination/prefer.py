"""How long a message's caller waits for the agent: the RFC 7240 ``Prefer`` header.

``Prefer: wait=N`` asks for an answer within N seconds; ``Prefer: respond-async`` asks for a
202 with the task instead of waiting (with ``wait=N`` too: wait N seconds, then the 202).
What was honoured is echoed in ``Preference-Applied``. A preference the service does not
understand, or a ``wait`` that is not a non-negative whole number of seconds, is ignored
(RFC 7240 section 2: "the server MUST ignore preferences it does not understand"), never a
400: a proxy or SDK that adds its own preferences cannot break a message.

Hand-written: the grammar is four lines (token ["=" word] *(";" parameter), comma
separated, case-insensitive names, quoted or bare values), and none of the runtime
dependencies parses it (Litestar has no Prefer support; werkzeug is only a dev dependency).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# RFC 7230 token characters (tchar).
_TCHAR = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
# Digits a wait may have: more would be a number no budget cap is near.
_WAIT_DIGITS = 9


@dataclass(frozen=True, slots=True)
class WaitPreference:
    """What a request asked for: a wait in seconds (None: the default) and respond-async."""

    wait_seconds: int | None = None
    respond_async: bool = False


@dataclass(frozen=True, slots=True)
class WaitBudget:
    """How the request is served: wait up to ``seconds`` for the agent, then answer with
    the fallback (or, with ``respond_async``, a 202 with the task); ``applied`` is the
    ``Preference-Applied`` value, or None when no preference was honoured."""

    seconds: float
    respond_async: bool
    applied: str | None

    @property
    def waits(self) -> bool:
        """True when the caller waits at all for the agent."""
        return self.seconds > 0


def parse_prefer(values: Iterable[str]) -> WaitPreference:
    """The wait preferences in every ``Prefer`` header value; the first of each name wins
    (RFC 7240 section 2)."""
    wait: int | None = None
    respond_async = False
    seen: set[str] = set()
    for value in values:
        for item in _split(value, ","):
            name, token_value = _preference(item)
            if not name or name in seen:
                continue
            seen.add(name)
            if name == "respond-async" and token_value is None:
                respond_async = True
            elif name == "wait" and token_value is not None:
                wait = _seconds(token_value)
    return WaitPreference(wait_seconds=wait, respond_async=respond_async)


def wait_budget(
    preference: WaitPreference, default_seconds: float, max_seconds: float
) -> WaitBudget:
    """The budget a request gets: its wait (capped at ``max_seconds``), else the default."""
    applied: list[str] = []
    if preference.respond_async:
        applied.append("respond-async")
    if preference.wait_seconds is not None:
        seconds = float(min(preference.wait_seconds, max_seconds))
        applied.append(f"wait={int(seconds)}")
    elif preference.respond_async:
        seconds = 0.0  # respond-async alone: the 202 at once
    else:
        seconds = default_seconds
    return WaitBudget(seconds, preference.respond_async, ", ".join(applied) or None)


def _split(value: str, separator: str) -> list[str]:
    """``value`` split at ``separator`` outside quoted strings."""
    parts: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif quoted and char == "\\":
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def _preference(item: str) -> tuple[str, str | None]:
    """A preference's lower-cased name and its value (unquoted), parameters dropped; an
    empty name when the item is not a preference."""
    head = _split(item, ";")[0]
    name, equals, raw = head.partition("=")
    name = name.strip().lower()
    if not name or not set(name) <= _TCHAR:
        return "", None
    if not equals:
        return name, None
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw = raw[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return name, raw


def _seconds(value: str) -> int | None:
    """A delta-seconds value (RFC 7240 section 4.3: 1*DIGIT), else None (ignored)."""
    if not value.isascii() or not value.isdigit() or len(value) > _WAIT_DIGITS:
        return None
    return int(value)
