"""The three-way merge (app/sessions/merge.py): properties over random documents and
changes, and the record lists of the session document merged by identity."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.errors import ValidationFailed
from app.sessions.merge import MISSING, Choice, merge3, pointer, resolve

KEYS = st.sampled_from(["a", "b", "c", "d", "e/f", "~g"])
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.text(alphabet="xyz", max_size=2)
)
DOCS = st.recursive(
    LEAVES,
    lambda children: st.dictionaries(KEYS, children, max_size=4) | st.lists(LEAVES, max_size=3),
    max_leaves=12,
)
OBJECTS = st.dictionaries(KEYS, DOCS, max_size=4)

Path = tuple[str, ...]


def canon(value: Any) -> str:
    """JSON-exact comparison (True is not 1; key order does not matter)."""
    return json.dumps(value, sort_keys=True)


def slots(doc: Any, prefix: Path = ()) -> list[Path]:
    """Every path a change may target: existing keys at any depth and one new key per object."""
    found: list[Path] = []
    if isinstance(doc, dict):
        for key in ["a", "b", "c", "d", "e/f", "~g"]:
            path = (*prefix, key)
            found.append(path)
            if key in doc:
                found.extend(slots(doc[key], path))
    return found


def get(doc: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return MISSING
        doc = doc[key]
    return doc


def apply(doc: Any, changes: dict[Path, Any]) -> Any:
    """``doc`` with each path set to its value (MISSING: removed)."""
    result = json.loads(json.dumps(doc))
    for path, value in changes.items():
        target = result
        for key in path[:-1]:
            target = target[key]
        if value is MISSING:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = json.loads(json.dumps(value))
    return result


def related(left: Path, right: Path) -> bool:
    shorter = min(len(left), len(right))
    return left[:shorter] == right[:shorter]


@st.composite
def change_set(draw: st.DrawFn, doc: Any, taken: list[Path]) -> dict[Path, Any]:
    """Changes to paths of ``doc`` unrelated to ``taken`` and to each other."""
    free = [p for p in slots(doc) if not any(related(p, t) for t in taken)]
    if not free:
        return {}
    chosen: list[Path] = []
    for path in draw(st.lists(st.sampled_from(free), max_size=4, unique=True)):
        if not any(related(path, c) for c in chosen):
            chosen.append(path)
    changes: dict[Path, Any] = {}
    for path in chosen:
        remove = get(doc, path) is not MISSING and draw(st.booleans())
        changes[path] = MISSING if remove else draw(DOCS)
    return changes


@settings(max_examples=400, deadline=None)
@given(data=st.data(), base=OBJECTS)
def test_disjoint_changes_merge_to_both_applied(data: st.DataObject, base: Any) -> None:
    ours = data.draw(change_set(base, []))
    theirs = data.draw(change_set(base, list(ours)))
    result = merge3(base, apply(base, theirs), apply(base, ours))
    assert result.conflicts == []
    assert canon(result.document) == canon(apply(apply(base, theirs), ours))


@settings(max_examples=400, deadline=None)
@given(data=st.data(), base=OBJECTS)
def test_the_same_path_changed_differently_conflicts(data: st.DataObject, base: Any) -> None:
    path = data.draw(st.sampled_from(slots(base)))
    old = get(base, path)
    mine = data.draw(LEAVES.filter(lambda v: canon(v) != canon_or_missing(old)))
    other = data.draw(LEAVES.filter(lambda v: canon(v) not in {canon_or_missing(old), canon(mine)}))
    extra = data.draw(change_set(base, [path]))
    ours = {path: mine, **extra}
    theirs = {path: other}
    result = merge3(base, apply(base, theirs), apply(base, ours))
    conflict = next(c for c in result.conflicts if c.path == pointer(path))
    assert (conflict.base, conflict.current, conflict.proposed) == (old, other, mine)
    # The current value stands until a resolution picks.
    assert canon(get(result.document, path)) == canon(other)


@settings(max_examples=400, deadline=None)
@given(base=OBJECTS, theirs=OBJECTS, ours=OBJECTS)
def test_a_merge_never_loses_a_field_either_side_set(base: Any, theirs: Any, ours: Any) -> None:
    result = merge3(base, theirs, ours)
    conflicted = [c.path for c in result.conflicts]
    for side in (theirs, ours):
        kept(result.document, side, base, [], conflicted)


def kept(merged: Any, side: Any, base: Any, path: list[str], conflicted: list[str]) -> None:
    """Every value ``side`` changed from ``base`` is in ``merged``, unless a conflict is
    reported at, above or below its path. Objects a side added or changed are walked."""
    if canon_or_missing(side) == canon_or_missing(base):
        return
    here = pointer(path)
    if path and any(
        c == here or c.startswith(here + "/") or here.startswith(c + "/") for c in conflicted
    ):
        return
    if isinstance(side, dict) and (isinstance(base, dict) or base is MISSING):
        assert isinstance(merged, dict), here
        base_dict = base if isinstance(base, dict) else {}
        for key in {*side, *base_dict}:
            kept(
                merged.get(key, MISSING),
                side.get(key, MISSING),
                base_dict.get(key, MISSING),
                [*path, key],
                conflicted,
            )
        return
    assert canon_or_missing(merged) == canon_or_missing(side), here


def canon_or_missing(value: Any) -> str:
    return "<missing>" if value is MISSING else canon(value)


@settings(max_examples=200, deadline=None)
@given(base=OBJECTS, change=OBJECTS)
def test_one_sided_changes_are_taken_whole(base: Any, change: Any) -> None:
    assert canon(merge3(base, base, change).document) == canon(change)
    assert canon(merge3(base, change, base).document) == canon(change)


# -- record lists ------------------------------------------------------------------------


def action(action_id: str, description: str = "") -> dict[str, Any]:
    return {"id": action_id, "type": "follow_up", "description": description}


@settings(max_examples=300, deadline=None)
@given(data=st.data(), count=st.integers(0, 6))
def test_pending_actions_merge_by_id(data: st.DataObject, count: int) -> None:
    ids = [f"a{i}" for i in range(count)]
    base = {"session_state": {"pending_actions": [action(i) for i in ids]}}
    mine = data.draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
    theirs_ids = [i for i in ids if i not in mine]
    other = data.draw(st.lists(st.sampled_from(theirs_ids), unique=True)) if theirs_ids else []
    my_deletes = set(data.draw(st.lists(st.sampled_from(mine), unique=True))) if mine else set()
    new_mine = data.draw(st.integers(0, 2))
    new_theirs = data.draw(st.integers(0, 2))

    def side(touched: list[str], deletes: set[str], tag: str, new: int) -> list[Any]:
        records = [action(i, tag if i in touched else "") for i in ids if i not in deletes]
        return records + [action(f"{tag}{n}", tag) for n in range(new)]

    ours_doc = {"session_state": {"pending_actions": side(mine, my_deletes, "ours", new_mine)}}
    theirs_doc = {"session_state": {"pending_actions": side(other, set(), "theirs", new_theirs)}}
    result = merge3(base, theirs_doc, ours_doc)
    assert result.conflicts == []
    merged = {
        a["id"]: a["description"] for a in result.document["session_state"]["pending_actions"]
    }
    expected = {
        **{i: ("ours" if i in mine else "theirs" if i in other else "") for i in ids},
        **{f"theirs{n}": "theirs" for n in range(new_theirs)},
        **{f"ours{n}": "ours" for n in range(new_mine)},
    }
    for deleted in my_deletes:
        expected.pop(deleted)
    assert merged == expected


def test_a_record_changed_on_both_sides_conflicts_at_its_field() -> None:
    base = {"session_state": {"pending_actions": [action("x"), action("y")]}}
    theirs = {"session_state": {"pending_actions": [action("y"), action("x", "theirs")]}}
    ours = {"session_state": {"pending_actions": [action("x", "ours"), action("y")]}}
    result = merge3(base, theirs, ours)
    [conflict] = result.conflicts
    # The index is the record's place in the merged (current-ordered) list.
    assert conflict.path == "/session_state/pending_actions/1/description"
    assert conflict.record == {"id": "x"}
    assert (conflict.base, conflict.current, conflict.proposed) == ("", "theirs", "ours")


def test_a_record_removed_on_one_side_and_changed_on_the_other_conflicts() -> None:
    base = {"agent_sequence": [{"execution_order": 1, "status": "executing"}]}
    theirs: dict[str, Any] = {"agent_sequence": []}
    ours = {"agent_sequence": [{"execution_order": 1, "status": "completed"}]}
    [conflict] = merge3(base, theirs, ours).conflicts
    assert conflict.path == "/agent_sequence/0"
    assert conflict.current is MISSING
    assert conflict.as_json()["current_present"] is False


def test_agent_sequence_steps_appended_on_both_sides_with_one_number_conflict() -> None:
    step = {"execution_order": 1, "agent_name": "a", "status": "completed"}
    base = {"agent_sequence": [step]}
    theirs = {"agent_sequence": [step, {"execution_order": 2, "agent_name": "b"}]}
    ours = {"agent_sequence": [step, {"execution_order": 2, "agent_name": "c"}]}
    [conflict] = merge3(base, theirs, ours).conflicts
    assert conflict.path == "/agent_sequence/1/agent_name"


def test_lists_that_are_not_record_lists_are_one_value() -> None:
    base = {"coordination_metadata": {"resource_requirements": ["cpu"]}}
    theirs = {"coordination_metadata": {"resource_requirements": ["cpu", "gpu"]}}
    ours = {"coordination_metadata": {"resource_requirements": ["cpu", "disk"]}}
    [conflict] = merge3(base, theirs, ours).conflicts
    assert conflict.path == "/coordination_metadata/resource_requirements"


# -- resolution --------------------------------------------------------------------------


def test_resolution_takes_one_choice_per_path() -> None:
    base = {"a": 1, "b": 1, "c": {"d": 1}, "e": 1}
    theirs = {"a": 2, "b": 2, "c": {"d": 2}, "e": 2}
    ours = {"a": 3, "b": 3, "c": {"d": 3}, "e": 3}
    result = merge3(base, theirs, ours)
    assert sorted(c.path for c in result.conflicts) == ["/a", "/b", "/c/d", "/e"]
    settled = resolve(
        result,
        {
            "/a": Choice("ours"),
            "/b": Choice("theirs"),
            "/c/d": Choice("value", {"own": True}),
            "/e": Choice("remove"),
        },
    )
    assert settled == {"a": 3, "b": 2, "c": {"d": {"own": True}}}


def test_resolution_must_settle_exactly_the_conflicts() -> None:
    result = merge3({"a": 1}, {"a": 2}, {"a": 3})
    with pytest.raises(ValidationFailed) as missing:
        resolve(result, {"/b": Choice("ours")})
    fields = {e["field"] for e in missing.value.extensions["errors"]}
    assert fields == {"/a", "/b"}


def test_resolution_removes_a_record_by_its_index() -> None:
    base = {"agent_sequence": [{"execution_order": 1, "s": 0}, {"execution_order": 2, "s": 0}]}
    theirs = {"agent_sequence": [{"execution_order": 1, "s": 1}, {"execution_order": 2, "s": 1}]}
    ours = {"agent_sequence": [{"execution_order": 1, "s": 2}, {"execution_order": 2, "s": 2}]}
    result = merge3(base, theirs, ours)
    assert [c.path for c in result.conflicts] == ["/agent_sequence/0/s", "/agent_sequence/1/s"]
    settled = resolve(
        result, {"/agent_sequence/0/s": Choice("ours"), "/agent_sequence/1/s": Choice("theirs")}
    )
    assert settled == {
        "agent_sequence": [{"execution_order": 1, "s": 2}, {"execution_order": 2, "s": 1}]
    }


def test_pointer_escapes_per_rfc_6901() -> None:
    assert pointer(["a/b", "c~d", 0]) == "/a~1b/c~0d/0"
