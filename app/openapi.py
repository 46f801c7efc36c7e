"""The OpenAPI document and the page that shows it, served from the package (no CDN).

Litestar derives the document from the handlers' signatures. What a signature cannot say is
added here, in one pass over the finished document (``complete``):

- every problem+json answer of every operation, with one shared ``Problem`` schema. Most
  statuses follow from mechanisms every route shares and are derived from the route itself
  (``derived_problems``: the key check, the guards, the body, the parameters, the path);
  the rest are the services' own rules, listed per operation in ``SERVICE_PROBLEMS``;
- the request bodies a handler parses itself: one memory or a batch of them, the session
  merge patch (``application/merge-patch+json``, or ``application/json``);
- the headers read from the request directly (the webhooks' ``Idempotency-Key`` and
  signature) and public operations' empty security.

tests/integration/test_openapi.py validates the served document and provokes every
documented problem against the real app, so a status listed here that a route cannot give
(or one a route gives without it being listed) fails the suite.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from litestar import Request, Response, Router, get
from litestar.datastructures import ResponseHeader
from litestar.enums import MediaType
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import (
    JsonRenderPlugin,
    OpenAPIRenderPlugin,
    YamlRenderPlugin,
)
from litestar.openapi.spec import Components, SecurityScheme
from litestar.params import FromPath
from litestar.routes import HTTPRoute
from pydantic import TypeAdapter
from swagger_ui_bundle import swagger_ui_path

from app.auth.guards import admin_only, admin_or_named_agent, integration_key
from app.auth.middleware import PUBLIC_PATHS
from app.common.preconditions import MAX_VERSION
from app.errors import PROBLEM_JSON, PROBLEM_TYPE_PREFIX, NotFound
from app.memories.schemas import MAX_BATCH, MemoryWrite
from app.sessions.schemas import SessionEditable
from app.webhooks.controller import signed
from app.webhooks.idempotency import RETRY_AFTER_SECONDS

if TYPE_CHECKING:
    from litestar import Litestar

DOCS_PATH = "/schema"
MERGE_PATCH_JSON = "application/merge-patch+json"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_SCHEMAS = "#/components/schemas/"

# -- the problems ---------------------------------------------------------------------------

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "An RFC 9457 problem: every error answer is application/problem+json with type, "
        "title, status, detail and instance, and, where they apply, the extensions below."
    ),
    "required": ["type", "title", "status", "detail", "instance"],
    "properties": {
        "type": {
            "type": "string",
            "pattern": f"^{re.escape(PROBLEM_TYPE_PREFIX)}[a-z-]+$",
            "description": "urn:switchboard:problem:<slug>, e.g. version-conflict.",
        },
        "title": {"type": "string"},
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string", "description": "What went wrong and what to do."},
        "instance": {"type": "string", "description": "The request path."},
        "errors": {
            "type": "array",
            "description": (
                "400, 409, 413 and 422: each offending field, as a dotted path ($ for the "
                "whole body; <index>.<field> in a batch)."
            ),
            "items": {"$ref": _SCHEMAS + "FieldError"},
        },
        "retryable": {
            "type": "boolean",
            "description": "409: a concurrent request got in the way; the same request may "
            "succeed when sent again.",
        },
        "current_version": {
            "type": ["integer", "null"],
            "description": "409 on a versioned write: the version there is now (null: none).",
        },
        "current": {
            "$ref": _SCHEMAS + "Session",
            "description": "409 on a session write: the session as it is now.",
        },
        "session_status": {
            "type": "string",
            "description": "409: the session's status that refuses the change.",
        },
        "existing_user_id": {
            "type": ["string", "null"],
            "format": "uuid",
            "description": "409 on POST /v1/users: the user holding that external_ref.",
        },
        "agent": {"type": "string", "description": "409: the agent that already has a key."},
        "parameter": {"type": "string", "description": "400: the query parameter at fault."},
        "jobs": {
            "type": "object",
            "description": "500 from the cleanup webhook: every job's result, by job.",
            "additionalProperties": {"type": "object"},
        },
        "failed": {
            "type": "array",
            "items": {"type": "string"},
            "description": "500 from the cleanup webhook: the jobs that did not succeed.",
        },
        "header": {"type": "string", "description": "400: the header at fault."},
    },
    "additionalProperties": True,
}

FIELD_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["field", "message"],
    "properties": {
        "field": {"type": "string"},
        "message": {"type": "string"},
        "source": {"type": "string", "enum": ["body", "query", "path", "header"]},
    },
}

# Headers some problems carry.
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer", "minimum": 1},
    }
}
_PROBLEM_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": 'Bearer realm="switchboard"',
            "schema": {"type": "string"},
        }
    },
    429: _RETRY_AFTER,
    503: _RETRY_AFTER,
}

# What the guards refuse with, by guard. A guard that is not here cannot be documented:
# ``derived_problems`` refuses to guess, so a new guard is described before it ships.
GUARD_PROBLEMS: dict[Callable[..., Any], tuple[int, str]] = {
    admin_only: (403, "Only the admin key may call this."),
    admin_or_named_agent: (403, "Only the admin key or the agent named in the path."),
    integration_key: (403, "Only the admin key or an agent with the coordination_manager role."),
    signed: (
        401,
        "A signature is wrong, stale or missing while required "
        "(X-Switchboard-Timestamp, X-Switchboard-Signature).",
    ),
}

# Create-or-replace routes: the resource their path names need not exist, so no 404.
CREATES_WHAT_ITS_PATH_NAMES = frozenset(
    {("PUT", "/v1/intents/{name}"), ("PUT", "/v1/memory-categories/{name}")}
)

_SESSION_404 = "No session with this id (or not a UUID)."
_STALE = (
    "The session is no longer at the version this write is based on: current_version and "
    "current say what is there now"
)
_CLOSED = "or the session is completed (session_status) and takes no such change."
_NEEDS_BASE = 'No If-Match: "<version>" and no base_version in the body.'
_MERGE_CONFLICT = (
    "with Prefer: merge=auto, paths changed since the base to other values (merge-conflict: "
    "conflicts lists each path with base, current and proposed)"
)
_BRANCH_CLOSED = "the branch was merged (branch_state), or the session is completed"
_BAD_IF_MATCH = (
    'If-Match is not a list of quoted versions ("3"), names a weak tag, or disagrees with '
    "base_version."
)
_KEY_IN_USE = "A live memory already holds this (user_id, category, key) (errors names key)."
_CONTENT_TOO_LARGE = "A memory's content is over the content limit (errors names it)."
_IN_PROGRESS = (
    "A request with the same Idempotency-Key is still running (Retry-After), or a "
    "concurrent one took the key over (retryable)."
)

# Statuses the services give beyond the derived ones, per operation, with why. Each key
# must name an operation of the document (``complete`` checks).
SERVICE_PROBLEMS: dict[tuple[str, str], dict[int, str]] = {
    ("GET", "/ready"): {503: "The database does not answer."},
    # The card lists the registry's skills, read from PostgreSQL (app/a2a/card.py).
    ("GET", "/.well-known/agent-card.json"): {503: "The database does not answer."},
    ("GET", "/.well-known/agent.json"): {503: "The database does not answer."},
    ("POST", "/v1/agents"): {409: "An agent of this name already has a key (agent)."},
    ("GET", "/v1/agents/{name}/card"): {404: "The agent has published no card."},
    ("POST", "/v1/agents/{name}/discover"): {
        422: "The agent has no url, or its card cannot be used (card_status invalid).",
        502: "The agent's card could not be fetched (card_status unreachable).",
    },
    ("GET", "/v1/users"): {404: "No user has this external_ref."},
    ("POST", "/v1/users"): {409: "Another user has this external_ref (existing_user_id)."},
    ("PATCH", "/v1/sessions/{session_id}"): {
        400: _BAD_IF_MATCH,
        409: f"{_STALE}; {_MERGE_CONFLICT}; {_CLOSED}",
        428: _NEEDS_BASE,
    },
    ("POST", "/v1/sessions/{session_id}/handoff"): {
        400: _BAD_IF_MATCH,
        409: f"{_STALE}; {_MERGE_CONFLICT}; {_CLOSED}",
        428: _NEEDS_BASE,
    },
    ("POST", "/v1/sessions/{session_id}/branches"): {
        409: "The session already has a branch of this name (branch), or it is completed.",
    },
    ("PATCH", "/v1/sessions/{session_id}/branches/{name}"): {
        400: _BAD_IF_MATCH,
        409: (
            "The branch is no longer at the version this write is based on "
            f"(current_version); {_MERGE_CONFLICT}; {_BRANCH_CLOSED}."
        ),
        428: _NEEDS_BASE,
    },
    ("POST", "/v1/sessions/{session_id}/branches/{name}/merge"): {
        409: (
            "The branch and the session changed paths to different values, or a memory key "
            "(/memories/{category}/{key}) both changed (merge-conflict: conflicts lists "
            "each; POST again with choices or a document); a memory of main changed during "
            f"the merge (retryable); or {_BRANCH_CLOSED}."
        ),
        413: "A choice's value for a memory key is over the content limit.",
    },
    ("PUT", "/v1/sessions/{session_id}/branches/{name}/memories/by-key"): {
        400: "If-Match is not a list of quoted versions, or If-None-Match is not *.",
        409: (
            "If-Match names another version than the memory the branch sees "
            "(current_version), or it sees none; If-None-Match: * and it sees one; the key "
            f"is held by a memory the caller may not read; or {_BRANCH_CLOSED}."
        ),
        413: _CONTENT_TOO_LARGE,
    },
    ("POST", "/v1/sessions/{session_id}/branches/{name}/rebase"): {
        409: (
            "The branch and the session changed paths to different values (merge-conflict: "
            f"conflicts lists each); or {_BRANCH_CLOSED}."
        ),
    },
    ("POST", "/v1/sessions/{session_id}/complete"): {
        400: _BAD_IF_MATCH,
        409: f"{_STALE}, {_CLOSED}",
        428: _NEEDS_BASE,
    },
    ("POST", "/v1/sessions/{session_id}/rollback"): {
        400: _BAD_IF_MATCH,
        409: f"{_STALE}, {_CLOSED}",
        428: _NEEDS_BASE,
    },
    ("POST", "/v1/sessions/{session_id}/touch"): {409: "The session is completed."},
    ("POST", "/v1/memories"): {409: _KEY_IN_USE, 413: _CONTENT_TOO_LARGE},
    ("PUT", "/v1/memories/by-key"): {
        400: "If-Match is not a list of quoted versions, or If-None-Match is not *.",
        409: (
            "If-Match names another version than the memory's (current_version), or none "
            "exists yet; If-None-Match: * and the memory exists; or the key is held by a "
            "memory the caller may not read."
        ),
        413: _CONTENT_TOO_LARGE,
    },
    ("GET", "/v1/memories"): {
        422: "None of user_id, session_id, agent_name or contains is given.",
    },
    ("POST", "/v1/memory-types"): {409: "A memory type of this name exists."},
    ("POST", "/v1/intents/analyze"): {404: "session_id names no session."},
    ("POST", "/v1/sessions/{session_id}/messages"): {
        409: (
            "The session is completed, or escalated: it waits for a person and takes no "
            "messages until resolved (session_status, resolve_url)."
        )
    },
    ("POST", "/v1/sessions/{session_id}/branches/{name}/messages"): {
        409: f"The branch was merged (branch_state), {_CLOSED}",
    },
    ("POST", "/v1/sessions/{session_id}/pending/next"): {
        400: "The Prefer header is longer than 1,024 characters.",
        409: (
            "Nothing is waiting, another caller is working on the next action, or the "
            "session is escalated (session_status, resolve_url)."
        ),
    },
    ("POST", "/v1/sessions/{session_id}/resolve"): {
        409: "The session is not escalated: there is nothing to resolve (session_status).",
    },
    ("POST", "/v1/jobs/{name}/run"): {
        409: "Another replica took the run over before it finished (its record says how).",
    },
    ("GET", "/v1/sessions/{session_id}/events"): {
        400: "Last-Event-ID (or after) is not the id of an event this service sent.",
        429: "This key already holds as many open event streams as it may "
        "(SWITCHBOARD_STREAM_MAX_PER_KEY).",
    },
    ("GET", "/v1/events/stream"): {
        400: "Last-Event-ID (or after) is not the id of an event this service sent, or "
        "types names an unknown event type.",
        429: "This key already holds as many open event streams as it may "
        "(SWITCHBOARD_STREAM_MAX_PER_KEY).",
    },
    ("POST", "/v1/sessions/{session_id}/restore"): {
        409: "The session is live: there is nothing to restore.",
    },
    ("POST", "/v1/tasks"): {
        404: "agent_name names no agent, or session_id no session.",
    },
    ("POST", "/v1/tasks/{task_id}/cancel"): {
        403: "The key is neither the task's submitter nor its agent (nor an integration key).",
        409: "The task is already over (status).",
    },
    ("POST", "/v1/dead-letters/{dead_letter_id}/requeue"): {
        409: "The dead letter was already requeued or discarded (state).",
    },
    ("DELETE", "/v1/dead-letters/{dead_letter_id}"): {
        409: "The dead letter was already requeued or discarded (state).",
    },
    ("POST", "/webhooks/n8n/coordination"): {
        404: "user_id names no user, or session_id no session.",
        409: _IN_PROGRESS + " Or the session is completed.",
    },
    ("POST", "/webhooks/n8n/memory"): {
        403: "agent_name names another agent and the key may not act for others.",
        404: "action read: memory_id names no memory the agent may read.",
        409: _IN_PROGRESS + " Or " + _KEY_IN_USE[0].lower() + _KEY_IN_USE[1:],
        413: _CONTENT_TOO_LARGE,
    },
    ("POST", "/webhooks/n8n/cleanup"): {
        404: "job names no job.",
        409: _IN_PROGRESS,
        500: (
            "A job did not succeed: jobs holds every job's result, failed names the ones "
            "that failed. Never stored under the Idempotency-Key: a retry runs again."
        ),
    },
}

_DERIVED: dict[str, tuple[int, str]] = {
    "no key": (401, "No API key, or one that is unknown, revoked or disabled."),
    "rate": (429, "This key sent more requests than its rate allows (Retry-After)."),
    "database": (503, "PostgreSQL is unavailable or too slow right now (Retry-After)."),
    "malformed": (
        400,
        "The body is not JSON: a syntax error, bytes that are not UTF-8, a member named "
        "twice, or nesting far too deep.",
    ),
    "too large": (413, "The body is over the body limit (SWITCHBOARD_MAX_BODY_BYTES)."),
    "media type": (415, "A body that is not JSON (Content-Type application/json or +json)."),
    "invalid": (
        422,
        "The body does not match its schema, or holds a value the service cannot store "
        "(errors names each field).",
    ),
    "parameter": (
        400,
        "A path or query parameter is malformed or out of range (errors names it).",
    ),
    "not found": (404, "What the path names does not exist (or, for an id, is not one)."),
}


@dataclass(frozen=True, slots=True)
class Operation:
    """What the document's problems of one operation are derived from."""

    method: str
    path: str  # as the document names it: /v1/sessions/{session_id}
    public: bool
    guards: tuple[Callable[..., Any], ...]
    has_body: bool
    checked_parameters: bool  # query parameters, or path parameters routing does not settle
    path_parameters: bool


def operations(app: Litestar) -> Iterator[Operation]:
    """The documented operations of ``app``, read from its route map."""
    public = [re.compile(pattern) for pattern in PUBLIC_PATHS]
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for method, (handler, kwargs_model) in route.route_handler_map.items():
            if method in ("OPTIONS", "HEAD") or not handler.resolve_include_in_schema():
                continue
            # A uuid path parameter that does not parse matches no route (404); any other
            # reaches the parameter rules (app/common/parameters.py: 400), as do query
            # parameters. Header parameters are read by the handlers (If-Match: see
            # SERVICE_PROBLEMS).
            routed = {
                name
                for name, definition in route.path_parameters.items()
                if definition.type is UUID
            }
            checked = bool(
                kwargs_model.expected_query_params
                or {p.field_name for p in kwargs_model.expected_path_params} - routed
            )
            yield Operation(
                method=method,
                path=route.path_format,
                public=any(pattern.match(route.path_format) for pattern in public),
                guards=tuple(
                    guard for layer in handler.ownership_layers for guard in layer.guards or ()
                ),
                has_body="data" in handler.parsed_fn_signature.parameters,
                checked_parameters=checked,
                path_parameters=bool(route.path_parameters),
            )


def derived_problems(operation: Operation) -> dict[int, list[str]]:
    """The problems an operation gives through the mechanisms every route shares."""
    reasons: list[tuple[int, str]] = []
    if not operation.public:
        reasons += [_DERIVED["no key"], _DERIVED["rate"], _DERIVED["database"]]
    for guard in operation.guards:
        if guard not in GUARD_PROBLEMS:
            raise RuntimeError(
                f"{operation.method} {operation.path}: guard {guard.__name__} has no entry in "
                "app/openapi.py GUARD_PROBLEMS; say what it answers."
            )
        reasons.append(GUARD_PROBLEMS[guard])
    if operation.checked_parameters:
        reasons.append(_DERIVED["parameter"])
    if operation.has_body:
        reasons += [_DERIVED["malformed"], _DERIVED["too large"], _DERIVED["invalid"]]
    if operation.method in _BODY_METHODS:
        reasons.append(_DERIVED["media type"])
    if (
        operation.path_parameters
        and (operation.method, operation.path) not in CREATES_WHAT_ITS_PATH_NAMES
    ):
        reasons.append(_DERIVED["not found"])
    problems: dict[int, list[str]] = {}
    for status, reason in reasons:
        problems.setdefault(status, []).append(reason)
    return problems


def problems_of(operation: Operation) -> dict[int, list[str]]:
    """Every problem status of an operation, with the reasons for each."""
    problems = derived_problems(operation)
    for status, reason in SERVICE_PROBLEMS.get((operation.method, operation.path), {}).items():
        problems.setdefault(status, []).append(reason)
    return dict(sorted(problems.items()))


def _problem_response(status: int, reasons: list[str]) -> dict[str, Any]:
    description = reasons[0] if len(reasons) == 1 else "\n".join(f"- {r}" for r in reasons)
    response: dict[str, Any] = {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": {"$ref": _SCHEMAS + "Problem"}}},
    }
    if status in _PROBLEM_HEADERS:
        response["headers"] = _PROBLEM_HEADERS[status]
    return response


# -- request bodies and headers the handlers read themselves -------------------------------


def _schema_of(model: Any, components: dict[str, Any]) -> dict[str, Any]:
    """A pydantic type's validation schema, its models added to the components (those the
    document has already stay as Litestar made them)."""
    schema = TypeAdapter(model).json_schema(ref_template=_SCHEMAS + "{model}")
    for name, definition in schema.pop("$defs", {}).items():
        components.setdefault(name, definition)
    return schema


def _allows_null(schema: dict[str, Any]) -> bool:
    kinds = schema.get("type")
    if kinds == "null" or (isinstance(kinds, list) and "null" in kinds):
        return True
    return any(_allows_null(s) for s in schema.get("oneOf", []) + schema.get("anyOf", []))


def _merge_patch_of(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """The RFC 7396 merge patch of a document with ``schema``: every member optional, an
    object member patched in turn, and null (removal) allowed where the document may lack
    the member; arrays and scalars are replaced whole."""
    ref = schema.get("$ref")
    if ref is not None:
        name = ref.removeprefix(_SCHEMAS)
        target = components[name]
        if target.get("type") != "object" or "properties" not in target:
            return schema
        patch_name = f"{name}Patch"
        if patch_name not in components:
            components[patch_name] = {}  # reserve the name: models may refer to themselves
            components[patch_name] = _merge_patch_of(target, components)
        return {"$ref": _SCHEMAS + patch_name}
    if "properties" not in schema:
        return schema
    required = set(schema.get("required", []))
    properties = {}
    for name, member in schema["properties"].items():
        # Absent means unchanged in a patch: a default says nothing there.
        patched = _merge_patch_of({k: v for k, v in member.items() if k != "default"}, components)
        if name not in required and not _allows_null(patched):
            patched = {"anyOf": [patched, {"type": "null"}]}
        properties[name] = patched
    patch = {key: value for key, value in schema.items() if key not in ("required", "title")}
    patch["properties"] = properties
    return patch


def _session_patch(components: dict[str, Any]) -> dict[str, Any]:
    schema = _merge_patch_of(_schema_of(SessionEditable, components), components)
    schema["properties"]["base_version"] = {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_VERSION,
        "description": "The version this patch is based on, instead of If-Match.",
    }
    schema["additionalProperties"] = False
    schema["description"] = (
        "An RFC 7396 JSON merge patch over the session's editable view: objects merge, null "
        "removes a member, anything else replaces it. progress_percentage may also be set "
        "as session_state.progress_percentage, priority as "
        "coordination_metadata.session_priority (both copies must agree)."
    )
    return schema


def _branch_patch(session_patch: dict[str, Any]) -> dict[str, Any]:
    """The session's patch without what is not branch content (status, preserve)."""
    schema = copy.deepcopy(session_patch)
    for member in ("status", "preserve"):
        schema["properties"].pop(member)
    schema["properties"]["base_version"]["description"] = (
        "The branch version this patch is based on, instead of If-Match."
    )
    schema["description"] = (
        "An RFC 7396 JSON merge patch over the branch's content, as for the session (status "
        "and preserve belong to the session, not to a branch)."
    )
    return schema


def _memory_write_body(components: dict[str, Any]) -> dict[str, Any]:
    one = _schema_of(MemoryWrite, components)
    components.setdefault("MemoryWrite", one)
    ref = {"$ref": _SCHEMAS + "MemoryWrite"}
    return {
        "oneOf": [
            ref,
            {"type": "array", "items": ref, "minItems": 1, "maxItems": MAX_BATCH},
        ],
        "description": (
            f"One memory (an object), or a batch of 1 to {MAX_BATCH} (an array, stored all or "
            "none; a failing item is named <index>.<field>)."
        ),
    }


_WEBHOOK_HEADERS: list[dict[str, Any]] = [
    {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "minLength": 1, "maxLength": 255},
        "description": (
            "Runs the call once per key and key owner (SWITCHBOARD_WEBHOOK_IDEMPOTENCY_TTL); a "
            "repeat gets the stored answer with Idempotent-Replayed: true, the same key with "
            "another body a 422. idempotency_key in the body does the same."
        ),
    },
    {
        "name": "X-Switchboard-Timestamp",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "pattern": "^[0-9]{1,12}$"},
        "description": "Unix seconds of the signature (with X-Switchboard-Signature).",
    },
    {
        "name": "X-Switchboard-Signature",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
        "description": (
            'v1=<hex HMAC-SHA256(SWITCHBOARD_WEBHOOK_SECRET, "<timestamp>.<raw body>")>; '
            "required when SWITCHBOARD_WEBHOOK_REQUIRE_SIGNATURE is true."
        ),
    },
]


def _add_parameters(operation: dict[str, Any], parameters: list[dict[str, Any]]) -> None:
    present = {(p["name"].lower(), p["in"]) for p in operation.get("parameters", [])}
    operation.setdefault("parameters", []).extend(
        p for p in parameters if (p["name"].lower(), p["in"]) not in present
    )


def _special_cases(paths: dict[str, Any], components: dict[str, Any]) -> None:
    memories = paths["/v1/memories"]["post"]
    memories["requestBody"]["content"] = {
        MediaType.JSON.value: {"schema": _memory_write_body(components)}
    }
    components["SessionPatch"] = _session_patch(components)
    patch_ref = {"schema": {"$ref": _SCHEMAS + "SessionPatch"}}
    session = paths["/v1/sessions/{session_id}"]
    session["patch"]["requestBody"]["content"] = {
        MERGE_PATCH_JSON: patch_ref,
        MediaType.JSON.value: copy.deepcopy(patch_ref),
    }
    components["BranchPatch"] = _branch_patch(components["SessionPatch"])
    branch_ref = {"schema": {"$ref": _SCHEMAS + "BranchPatch"}}
    paths["/v1/sessions/{session_id}/branches/{name}"]["patch"]["requestBody"]["content"] = {
        MERGE_PATCH_JSON: branch_ref,
        MediaType.JSON.value: copy.deepcopy(branch_ref),
    }
    session["get"]["responses"]["304"] = {
        "description": "If-None-Match names the current ETag: nothing changed.",
        "headers": {"ETag": {"description": "The session version.", "schema": {"type": "string"}}},
    }
    for path, item in paths.items():
        if path.startswith("/webhooks/"):
            operation = item["post"]
            _add_parameters(operation, _WEBHOOK_HEADERS)
            operation["responses"]["200"].setdefault("headers", {})["Idempotent-Replayed"] = {
                "description": "true when this is the stored answer of an earlier call.",
                "schema": {"type": "string", "enum": ["true"]},
            }
    in_progress = {
        "Retry-After": {
            "description": f"Seconds to wait ({RETRY_AFTER_SECONDS}) while the first call runs.",
            "schema": {"type": "integer"},
        }
    }
    for path in ("/webhooks/n8n/coordination", "/webhooks/n8n/memory", "/webhooks/n8n/cleanup"):
        paths[path]["post"]["responses"]["409"]["headers"] = in_progress


def complete(source: dict[str, Any], app: Litestar) -> dict[str, Any]:
    """The served document: Litestar's ``source`` (not changed) with the problems, bodies
    and headers above."""
    document = copy.deepcopy(source)
    paths: dict[str, Any] = document["paths"]
    components: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    components["Problem"] = copy.deepcopy(PROBLEM_SCHEMA)
    components["FieldError"] = copy.deepcopy(FIELD_ERROR_SCHEMA)
    documented = set()
    for operation in operations(app):
        entry = paths[operation.path][operation.method.lower()]
        documented.add((operation.method, operation.path))
        responses = entry.setdefault("responses", {})
        # Litestar's generic 400 ("Validation Exception", application/json) is not what this
        # app answers; the problems below replace it.
        responses.pop("400", None)
        for status, reasons in problems_of(operation).items():
            responses[str(status)] = _problem_response(status, reasons)
        if operation.public:
            entry["security"] = []
        for response in responses.values():
            # Litestar writes a documentation-only header (ETag) without a schema, which
            # OpenAPI requires.
            for header in response.get("headers", {}).values():
                if "schema" not in header and "content" not in header:
                    header["schema"] = {"type": "string"}
    unknown = set(SERVICE_PROBLEMS) - documented
    if unknown:
        raise RuntimeError(f"SERVICE_PROBLEMS names operations that do not exist: {unknown}")
    _special_cases(paths, components)
    document["info"]["description"] = _DESCRIPTION
    return document


def document(app: Litestar) -> dict[str, Any]:
    """The document as ``/schema/openapi.json`` serves it."""
    return complete(app.openapi_schema.to_schema(), app)


_DESCRIPTION = """Session coordination for multi-agent systems.

Every /v1 and /webhooks route needs `Authorization: Bearer <key>` or `X-API-Key: <key>`;
/health, /ready, /metrics, /schema and /.well-known are public. `POST /a2a`, the A2A 1.0
JSON-RPC endpoint (same keys), is described by the A2A agent card at
/.well-known/agent-card.json rather than here; see docs/a2a.md.

Every error is `application/problem+json` (the `Problem` schema); each operation lists the
statuses it can answer with and why. Besides those, the HTTP server itself may refuse a
request on any path before it is routed: 400 (bytes that are not HTTP), 408 (a request head
too slow), 414 and 431 (a request line or head over the limits), 503 with Retry-After (too
many connections); see the README."""


class CompletedDocument:
    """``complete``, once per Litestar document (the render plugins share one)."""

    def __init__(self) -> None:
        self._source: dict[str, Any] | None = None
        self._document: dict[str, Any] = {}

    def of(self, request: Request[Any, Any, Any], source: dict[str, Any]) -> dict[str, Any]:
        """The served document for Litestar's ``source``."""
        if source is not self._source:
            self._document = complete(source, request.app)
            self._source = source
        return self._document


class DocumentJson(JsonRenderPlugin):
    """``/schema/openapi.json``: the completed document."""

    def __init__(self, completed: CompletedDocument) -> None:
        super().__init__()
        self._completed = completed

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        """The document as JSON."""
        return super().render(request, self._completed.of(request, openapi_schema))


class DocumentYaml(YamlRenderPlugin):
    """``/schema/openapi.yaml`` (and ``.yml``): the completed document."""

    def __init__(self, completed: CompletedDocument) -> None:
        super().__init__()
        self._completed = completed

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        """The document as YAML."""
        return super().render(request, self._completed.of(request, openapi_schema))


# -- the page -------------------------------------------------------------------------------

# Swagger UI's files from the swagger-ui-bundle-v2 package: the very files of the npm
# package swagger-ui-dist of the same version (docs/design.md), served from here under a
# path that names the version, so a browser may keep them for good.
SWAGGER_UI_DIR = Path(str(swagger_ui_path))
SWAGGER_UI_VERSION = SWAGGER_UI_DIR.name.removeprefix("swagger-ui-")
ASSET_ROUTE = "swagger_ui_asset"
ASSETS: dict[str, str] = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
    "switchboard-docs.js": "text/javascript; charset=utf-8",  # ours, below
}
# The page's one script of its own, a file rather than inline, so the page's CSP can
# refuse every inline script.
_INIT_SCRIPT = b"""window.addEventListener("load", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.url,
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    tryItOutEnabled: false,
    persistAuthorization: false
  });
});
"""
# Nothing but this server: no script, style, font or image from elsewhere, no inline script.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


@functools.cache
def _asset(name: str) -> bytes:
    if name == "switchboard-docs.js":
        return _INIT_SCRIPT
    return (SWAGGER_UI_DIR / name).read_bytes()


@get(
    f"/assets/swagger-ui-{SWAGGER_UI_VERSION}/{{file:str}}",
    name=ASSET_ROUTE,
    sync_to_thread=False,
    include_in_schema=False,
)
def swagger_ui_asset(file: FromPath[str]) -> Response[bytes]:
    """One file of the page, from the package; 404 for any other name."""
    media_type = ASSETS.get(file)
    if media_type is None:
        raise NotFound(f"No documentation asset {file!r}.")
    return Response(
        _asset(file),
        media_type=media_type,
        headers={"Cache-Control": "public, max-age=31536000, immutable"},
    )


class OfflineSwaggerUI(OpenAPIRenderPlugin):
    """Swagger UI at ``/schema`` and ``/schema/swagger``, its files served by this app."""

    def __init__(self) -> None:
        super().__init__(path=["/", "/swagger"], favicon="", style="")

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        """The page: the bundle, its style, and the script that points it at the document."""

        def asset(name: str) -> str:
            return request.app.route_reverse(ASSET_ROUTE, file=name)

        title = openapi_schema["info"]["title"]
        return f"""<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title} API</title>
  <link rel="icon" type="image/png" href="{asset("favicon-32x32.png")}">
  <link rel="stylesheet" href="{asset("swagger-ui.css")}">
</head>
<body>
  <div id="swagger-ui" data-url="{self.get_openapi_json_route(request)}"></div>
  <script src="{asset("swagger-ui-bundle.js")}"></script>
  <script src="{asset("switchboard-docs.js")}"></script>
</body>
</html>
""".encode()

    def receive_router(self, router: Router) -> None:
        """Serve the page's files beside it."""
        router.register(swagger_ui_asset)


def openapi_config(version: str) -> OpenAPIConfig:
    """The document at ``/schema/openapi.json`` (and ``.yaml``), Swagger UI at ``/schema``."""
    completed = CompletedDocument()
    return OpenAPIConfig(
        title="Switchboard",
        version=version,
        description=_DESCRIPTION,
        path=DOCS_PATH,
        components=Components(
            security_schemes={
                "bearer": SecurityScheme(type="http", scheme="bearer"),
                "apiKey": SecurityScheme(
                    type="apiKey", name="X-API-Key", security_scheme_in="header"
                ),
            }
        ),
        security=[{"bearer": []}, {"apiKey": []}],
        render_plugins=[OfflineSwaggerUI(), DocumentJson(completed), DocumentYaml(completed)],
        openapi_router=Router(
            DOCS_PATH,
            route_handlers=[],
            include_in_schema=False,
            response_headers=[
                ResponseHeader(name="Content-Security-Policy", value=CONTENT_SECURITY_POLICY),
                ResponseHeader(name="X-Content-Type-Options", value="nosniff"),
            ],
        ),
    )
