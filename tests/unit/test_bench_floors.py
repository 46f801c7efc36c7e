"""The own-floor machinery's logic (bench/floors.py, bench/paths.py) without a database:
how two captures become bindings, and how a path becomes wrk scripts and requests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench import floors, profile
from bench.paths import HttpPath, Number, Pick, Unique

AT = datetime(2026, 11, 25, 3, 0, tzinfo=UTC)


def call(query: str, *args: object, rows: list[dict[str, object]] | None = None) -> floors.Call:
    return floors.Call("fetchrow", query, tuple(args), {}, 0, AT, rows or [])


def capture(session: uuid.UUID, version: int, n: int, written: datetime) -> list[floors.Call]:
    """A read, then an optimistic write using the version read, a merged document holding
    the request's number, a constant and a timestamp the application made."""
    return [
        floors.Call("execute", "BEGIN;", (), {}, 0, AT, status="BEGIN"),
        call("SELECT", session, rows=[{"session_id": session, "version": version}]),
        call("UPDATE", session, version, {"outputs": {"bench": n}}, "patched", written),
        floors.Call("execute", "COMMIT;", (), {}, 0, AT, status="COMMIT"),
    ]


def test_two_captures_bind_values_results_templates_constants_and_fresh_times() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    plan = floors.build_plan(
        capture(a, 3, 111, AT + timedelta(seconds=1)),
        capture(b, 1, 222, AT + timedelta(seconds=2)),
        {"session": str(a), "n": "111"},
        {"session": str(b), "n": "222"},
    )
    update = plan.steps[2]
    session, version, document, reason, written = update.args
    assert session == floors.Var("session", "uuid")
    assert version == floors.FromResult(1, "fetchrow", 0, "version")
    assert isinstance(document, floors.Template)
    assert reason == floors.Const("patched")
    assert isinstance(written, floors.Fresh)
    # Replayed with other values: the request's id and number, the version just read.
    other = uuid.uuid4()
    values = {"session": str(other), "n": "333"}
    results = [None, {"session_id": other, "version": 7}, None, None]
    assert session.value(values, results) == other
    assert version.value(values, results) == 7
    assert document.value(values, results) == {"outputs": {"bench": 333}}
    assert document.constant == {"outputs": {"bench": 111}}  # the capture is left alone
    when = written.value(values, results)
    assert abs(when - datetime.now(UTC)) < timedelta(seconds=5)
    assert plan.statements == 2
    assert plan.round_trips == 4
    assert plan.segments == [[0, 1, 2, 3]]


def test_the_same_value_in_both_captures_is_a_constant_unless_a_result_gave_it() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    # Both sessions at version 1: the version still comes from the read, not a constant.
    plan = floors.build_plan(
        capture(a, 1, 5, AT), capture(b, 1, 6, AT), {"session": str(a)}, {"session": str(b)}
    )
    assert plan.steps[2].args[1] == floors.FromResult(1, "fetchrow", 0, "version")
    # A document that differs for no reason the request names is replayed as captured.
    document = plan.steps[2].args[2]
    assert document == floors.Fresh({"outputs": {"bench": 5}})
    assert document.value({}, []) == {"outputs": {"bench": 5}}


def test_ids_made_by_the_application_are_fresh_per_request() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    plan = floors.build_plan(
        [call("INSERT", first, b"\x01\x02")], [call("INSERT", second, b"\x03\x04")], {}, {}
    )
    made, digest = plan.steps[0].args
    assert isinstance(made, floors.Fresh)
    assert isinstance(digest, floors.Fresh)
    ids = {made.value({}, []) for _ in range(3)}
    assert len(ids) == 3
    assert first not in ids
    assert second not in ids
    assert ids == {i for i in ids if i.version == 7}
    assert len(digest.value({}, [])) == 2


def test_a_text_holding_the_request_value_is_rewritten_in_place() -> None:
    plan = floors.build_plan(
        [call("INSERT", {"key": "user abcd1234 wrote"})],
        [call("INSERT", {"key": "user efgh5678 wrote"})],
        {"user": "abcd1234"},
        {"user": "efgh5678"},
    )
    (template,) = plan.steps[0].args
    assert template.value({"user": "zzzz9999"}, []) == {"key": "user zzzz9999 wrote"}


def test_a_list_argument_can_come_from_every_row_of_an_earlier_result() -> None:
    ids_a, ids_b = [uuid.uuid4(), uuid.uuid4()], [uuid.uuid4()]

    def run(ids: list[uuid.UUID]) -> list[floors.Call]:
        listed = floors.Call(
            "fetch", "SELECT", (), {}, 0, AT, [{"memory_id": i, "n": 1} for i in ids]
        )
        return [listed, call("AUDIT", ids)]

    plan = floors.build_plan(run(ids_a), run(ids_b), {}, {})
    binding = plan.steps[1].args[0]
    assert binding == floors.FromResult(0, "fetch", None, "memory_id")
    assert binding.value({}, [[{"memory_id": 9}, {"memory_id": 8}], None]) == [9, 8]


def test_captures_that_sent_different_statements_are_refused() -> None:
    with pytest.raises(floors.CaptureMismatch):
        floors.build_plan([call("SELECT 1")], [call("SELECT 1"), call("SELECT 2")], {}, {})


def test_a_new_connection_starts_a_new_acquire() -> None:
    calls = [call("A"), floors.Call("fetchrow", "B", (), {}, 1, AT), call("C")]
    plan = floors.build_plan(calls, calls, {}, {})
    assert plan.segments == [[0], [1], [2]]


def test_a_path_renders_its_wrk_scripts_and_requests_from_one_entry(tmp_path: Path) -> None:
    path = HttpPath(
        "PATCH",
        "/v1/sessions/${session}",
        (Pick("session", ("s1", "s2")), Number("n", 1000), Unique("key", "k")),
        '{"a": {"b": ${n}}}',
        {"Idempotency-Key": "${key}"},
    )
    real = path.lua(tmp_path, "patch", "secret").read_text()
    assert 'choices_session = {"s1","s2"}' in real
    assert 'wrk.format("PATCH", [==[/v1/sessions/]==] .. v_session, nil,' in real
    assert '[==[{"a": {"b": ]==] .. v_n .. [==[}}]==]' in real
    assert 'wrk.headers["Idempotency-Key"] = v_key' in real
    floor = path.lua(tmp_path, "patch-floor", "secret", floor="p3").read_text()
    assert (
        "[==[/own-floor/p3?session=]==] .. v_session .. [==[&n=]==] .. v_n"
        " .. [==[&key=]==] .. v_key" in floor
    )
    a, b = path.sample(0), path.sample(1)
    assert a["session"] != b["session"]
    assert a["n"] != b["n"]
    assert a["key"] != path.sample(0)["key"]
    assert 1 <= int(a["n"]) <= 1000
    method, url, headers, body = path.request(a)
    assert (method, url) == ("PATCH", f"/v1/sessions/{a['session']}")
    assert headers == {"Idempotency-Key": a["key"]}
    assert body == '{"a": {"b": ' + a["n"] + "}}"


def test_profile_top_costs_count_self_time_by_function_and_by_component(
    tmp_path: Path,
) -> None:
    collapsed = tmp_path / "stacks.txt"
    root = "<module> (bench/serve.py:87);run (/x/lib/python3.11/asyncio/runners.py:118)"
    handle = "handle (/r/app/sessions/service.py:10)"
    collapsed.write_text(
        f"{root};{handle};encode (/v/site-packages/msgspec/x.py:3) 6\n"
        f"{root};{handle} 2\n"
        f"{root};_execute (/v/site-packages/asyncpg/connection.py:9) 2\n"
    )
    top = profile.top_costs(collapsed, n=2)
    assert top["samples"] == 10
    assert top["self %"] == [
        ["encode (msgspec/x.py)", 60.0],
        ["handle (app/sessions/service.py)", 20.0],
    ]
    assert top["components %"] == [["msgspec", 60.0], ["app/sessions", 20.0]]


def test_a_list_that_grows_what_was_read_keeps_growing_at_replay() -> None:
    def run(sequence: list[str], added: str) -> list[floors.Call]:
        return [
            call("SELECT", rows=[{"agent_sequence": sequence}]),
            call("UPDATE", [*sequence, added]),
        ]

    plan = floors.build_plan(run(["a", "b"], "c1"), run(["x"], "c2"), {}, {})
    (binding,) = plan.steps[1].args
    assert binding == floors.Appended(
        floors.FromResult(0, "fetchrow", 0, "agent_sequence"), ("c1",)
    )
    read_now = {"agent_sequence": ["p", "q", "r"]}
    assert binding.value({}, [read_now, None]) == ["p", "q", "r", "c1"]
