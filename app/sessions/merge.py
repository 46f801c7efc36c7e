"""Three-way merge of session documents: pure, no database, no clock.

A write based on an older version (``base``) is merged with what happened since
(``current``, "theirs") instead of being refused, when the two changes touch disjoint paths.
Objects merge key by key; lists that hold records (``pending_actions``, ``agent_sequence``)
merge record by record, each record found by its identity (``id``, ``execution_order``)
rather than by its index, so two agents that each append or change a different record do
not collide. Any other value (a scalar, a list of scalars) is one value: changed on both
sides to different values, it is a conflict, reported as a JSON Pointer (RFC 6901) with the
base, current and proposed values. Where a conflict is reported, the merged document holds
the current value; a resolution then decides (:func:`resolve`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.errors import ValidationFailed


class _Missing:
    """The value at a path that does not exist (distinct from JSON null)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()

# Record lists of the session document and the field that names a record. A path is the
# object keys leading to the list (list indices are not part of it).
SESSION_RECORD_IDENTITIES: Final[Mapping[tuple[str, ...], str]] = {
    ("session_state", "pending_actions"): "id",
    ("agent_sequence",): "execution_order",
}


@dataclass(frozen=True, slots=True)
class MergeConflict:
    """One path both sides changed to different values. ``record`` names the record (its
    identity field and value) when the path goes through a record list."""

    path: str
    base: Any
    current: Any
    proposed: Any
    record: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        """The problem-body form: absent values are shown as null with a ``*_present`` flag."""
        body: dict[str, Any] = {"path": self.path}
        for name in ("base", "current", "proposed"):
            value = getattr(self, name)
            body[name] = None if value is MISSING else value
            if value is MISSING:
                body[f"{name}_present"] = False
        if self.record is not None:
            body["record"] = self.record
        return body


@dataclass(frozen=True, slots=True)
class MergeResult:
    """The merged document (current values where conflicts are) and the conflicts."""

    document: Any
    conflicts: list[MergeConflict]

    @property
    def clean(self) -> bool:
        """True if nothing conflicted."""
        return not self.conflicts


def pointer(segments: Sequence[str | int]) -> str:
    """The JSON Pointer of a path (RFC 6901 escaping)."""
    return "".join("/" + str(s).replace("~", "~0").replace("/", "~1") for s in segments)


def merge3(
    base: Any,
    current: Any,
    proposed: Any,
    identities: Mapping[tuple[str, ...], str] = SESSION_RECORD_IDENTITIES,
) -> MergeResult:
    """Merge ``proposed`` (ours) into ``current`` (theirs), both derived from ``base``."""
    conflicts: list[MergeConflict] = []
    document = _merge(base, current, proposed, [], (), identities, conflicts, None)
    return MergeResult(document=None if document is MISSING else document, conflicts=conflicts)


def _merge(
    base: Any,
    current: Any,
    proposed: Any,
    path: list[str | int],
    keys: tuple[str, ...],
    identities: Mapping[tuple[str, ...], str],
    conflicts: list[MergeConflict],
    record: dict[str, Any] | None,
) -> Any:
    if _same(current, proposed):
        return current
    if _same(base, current):
        return proposed
    if _same(base, proposed):
        return current
    # Both sides changed this value, differently.
    if isinstance(current, dict) and isinstance(proposed, dict) and _dict_or_missing(base):
        base_dict: dict[str, Any] = base if isinstance(base, dict) else {}
        merged: dict[str, Any] = {}
        ordered = list(current) + [k for k in proposed if k not in current]
        ordered += [k for k in base_dict if k not in current and k not in proposed]
        for key in ordered:
            value = _merge(
                base_dict.get(key, MISSING),
                current.get(key, MISSING),
                proposed.get(key, MISSING),
                [*path, key],
                (*keys, key),
                identities,
                conflicts,
                record,
            )
            if value is not MISSING:
                merged[key] = value
        return merged
    identity = identities.get(keys)
    if (
        identity is not None
        and isinstance(current, list)
        and isinstance(proposed, list)
        and (isinstance(base, list) or base is MISSING)
    ):
        merged_list = _merge_records(
            base if isinstance(base, list) else [],
            current,
            proposed,
            identity,
            path,
            keys,
            identities,
            conflicts,
        )
        if merged_list is not None:
            return merged_list
    conflicts.append(MergeConflict(pointer(path), base, current, proposed, record))
    return current


def _merge_records(
    base: list[Any],
    current: list[Any],
    proposed: list[Any],
    identity: str,
    path: list[str | int],
    keys: tuple[str, ...],
    identities: Mapping[tuple[str, ...], str],
    conflicts: list[MergeConflict],
) -> list[Any] | None:
    """Records merged by identity, in current's order with proposed's new records after;
    None if a side's records cannot be told apart (the list is then one value)."""
    indexed = [_index(items, identity) for items in (base, current, proposed)]
    if any(index is None for index in indexed):
        return None
    base_ix, current_ix, proposed_ix = (index for index in indexed if index is not None)
    order = list(current_ix) + [k for k in proposed_ix if k not in current_ix]
    # A record deleted on one side keeps its place for the other side's edits only.
    order += [k for k in base_ix if k not in current_ix and k not in proposed_ix]
    merged: list[Any] = []
    for key in order:
        position = len(merged)
        value = _merge(
            base_ix.get(key, MISSING),
            current_ix.get(key, MISSING),
            proposed_ix.get(key, MISSING),
            [*path, position],
            keys,
            identities,
            conflicts,
            _record_name(key, identity),
        )
        if value is not MISSING:
            merged.append(value)
    return merged


def _index(items: list[Any], identity: str) -> dict[str, Any] | None:
    """Records by identity: the identity field's value, or (for records without one) the
    record's whole content. None if two records share an identity."""
    index: dict[str, Any] = {}
    for item in items:
        key = _identity_of(item, identity)
        if key in index:
            return None
        index[key] = item
    return index


def _identity_of(item: Any, identity: str) -> str:
    if isinstance(item, dict) and item.get(identity) is not None:
        return "k:" + _canonical(item[identity])
    return "c:" + _canonical(item)


def _record_name(key: str, identity: str) -> dict[str, Any]:
    if key.startswith("k:"):
        return {identity: json.loads(key[2:])}
    return {"content": json.loads(key[2:])}


def _dict_or_missing(value: Any) -> bool:
    return isinstance(value, dict) or value is MISSING


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _same(left: Any, right: Any) -> bool:
    """JSON equality: true is not 1, 1 is 1.0, objects ignore key order, lists do not."""
    if left is MISSING or right is MISSING:
        return left is right
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(
            _same(a, b) for a, b in zip(left, right, strict=True)
        )
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    return type(left) is type(right) and bool(left == right)


# -- resolution ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Choice:
    """How one conflicting path is settled: ``ours`` (proposed), ``theirs`` (current) or a
    ``value`` of its own (``remove`` drops the path)."""

    take: str  # "ours" | "theirs" | "value" | "remove"
    value: Any = None


def resolve(result: MergeResult, choices: Mapping[str, Choice]) -> Any:
    """The merged document with every conflict settled by ``choices`` (keyed by path);
    422 naming each conflict left without a choice and each choice for no conflict."""
    by_path = {conflict.path: conflict for conflict in result.conflicts}
    errors = [
        {"field": path, "message": "no choice for this conflicting path"}
        for path in by_path
        if path not in choices
    ] + [
        {"field": path, "message": "not a conflicting path of this merge"}
        for path in choices
        if path not in by_path
    ]
    if errors:
        raise ValidationFailed("The resolution must settle exactly the conflicts.", errors=errors)
    document = _copy(result.document)
    # Deepest paths first, so removing a record does not shift a later one's index.
    for path in sorted(by_path, key=lambda p: (p.count("/"), p), reverse=True):
        conflict, choice = by_path[path], choices[path]
        if choice.take == "theirs":
            continue
        if choice.take == "ours":
            value = conflict.proposed
        elif choice.take == "remove":
            value = MISSING
        else:
            value = choice.value
        document = _set(document, _segments(path), value)
    return document


def _segments(path: str) -> list[str]:
    return [s.replace("~1", "/").replace("~0", "~") for s in path.split("/")[1:]]


def _set(document: Any, segments: list[str], value: Any) -> Any:
    if not segments:
        return None if value is MISSING else value
    head, rest = segments[0], segments[1:]
    if isinstance(document, list):
        position = int(head)
        if position < len(document):
            child = _set(document[position], rest, value)
            if child is MISSING or (value is MISSING and not rest):
                return document[:position] + document[position + 1 :]
            return [*document[:position], child, *document[position + 1 :]]
        return document if value is MISSING else [*document, _set(None, rest, value)]
    container = dict(document) if isinstance(document, dict) else {}
    if value is MISSING and not rest:
        container.pop(head, None)
        return container
    container[head] = _set(container.get(head), rest, value)
    return container


def _copy(value: Any) -> Any:
    return json.loads(_canonical(value)) if value is not None else None
