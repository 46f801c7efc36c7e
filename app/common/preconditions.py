"""Optimistic concurrency: ETags carry the session version, ``If-Match`` carries the base.

The ETag of a versioned resource is its version number in quotes (``"7"``). A write names
the version it was based on with ``If-Match: "7"`` or a ``base_version`` body field.
"""

from __future__ import annotations

import re
from typing import Any

from app.errors import BadRequest, PreconditionRequired, ValidationFailed

# [0-9], not \d: \d also matches other scripts' digits, which int() would then accept.
_ENTITY_TAG = re.compile(r'[ \t]*(W/)?"([0-9]+)"[ \t]*')
# Versions stay below 2**62 (a session would need billions of writes a second for centuries).
MAX_VERSION = (1 << 62) - 1
_MAX_VERSION_DIGITS = len(str(MAX_VERSION))


def etag(version: int) -> str:
    """The strong entity tag for a version."""
    return f'"{version}"'


def parse_if_match(header: str | None) -> set[int] | None:
    """Versions listed in an ``If-Match`` header; None when absent or ``*`` (any version).

    Weak tags never match under If-Match (RFC 9110 strong comparison), so they are refused
    rather than silently ignored.
    """
    if header is None or header.strip() == "*":
        return None
    versions: set[int] = set()
    for part in header.split(","):
        match = _ENTITY_TAG.fullmatch(part)
        if match is None:
            raise BadRequest(
                'If-Match must list quoted version numbers, e.g. If-Match: "3".',
                header="If-Match",
            )
        if match.group(1):
            raise BadRequest("If-Match needs a strong entity tag; W/ tags never match.")
        digits = match.group(2)
        # A tag of 0 is well formed and simply matches nothing (409 when compared); one
        # past the largest version would need an integer the stack does not hold.
        if len(digits) > _MAX_VERSION_DIGITS or int(digits) > MAX_VERSION:
            raise BadRequest(
                f"If-Match names a version above {MAX_VERSION}, the largest there can be.",
                header="If-Match",
            )
        versions.add(int(digits))
    return versions


def required_base_versions(
    if_match: str | None, base_version: int | None, *, wildcard_ok: bool = True
) -> set[int] | None:
    """Combine the header and body preconditions; 428 when neither was sent.

    Returns the acceptable base versions, or None for ``If-Match: *`` (write whatever is
    current). Header and body must agree when both are sent.
    """
    header_versions = parse_if_match(if_match)
    if if_match is None and base_version is None:
        raise PreconditionRequired(
            'This write needs the version it is based on: send If-Match: "<version>" '
            "(the ETag of your last read) or base_version in the body."
        )
    if base_version is None:
        if header_versions is None and not wildcard_ok:
            raise BadRequest("If-Match: * is not accepted here; name the version.")
        return header_versions
    if header_versions is not None and base_version not in header_versions:
        raise BadRequest("If-Match and base_version disagree; send one of them.")
    return {base_version}


def body_base_version(value: Any) -> int | None:
    """``base_version`` taken from a free-form (merge patch) body; 422 unless a positive int."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_VERSION:
        raise ValidationFailed(
            f"base_version must be an integer from 1 to {MAX_VERSION}.",
            errors=[
                {"field": "base_version", "message": f"expected an integer from 1 to {MAX_VERSION}"}
            ],
        )
    return value


def merge_preference(prefer: str | None) -> bool | None:
    """``Prefer: merge=auto`` (True) or ``merge=strict`` (False) from a Prefer header
    (RFC 7240); None when it names neither (the server's default applies). Preferences the
    server does not know, or values it does not know, are ignored as RFC 7240 asks."""
    if prefer is None:
        return None
    choice: bool | None = None
    for preference in prefer.split(","):
        token, _, value = preference.split(";", 1)[0].partition("=")
        if token.strip().lower() != "merge":
            continue
        value = value.strip().strip('"').lower()
        if value in {"auto", "strict"}:
            choice = value == "auto"
    return choice


def merged_write(bases: set[int] | None, written_version: int) -> bool:
    """True if a write at ``written_version`` was merged: its base was not the version it
    replaced."""
    return bases is not None and written_version - 1 not in bases
