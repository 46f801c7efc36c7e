"""Memories: writes, reads, search, upserts by key, retention, context and categories."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from app.clock import Clock, FrozenClock
from tests.integration.helpers import assert_problem, create_session, create_user


def memory(user_id: str, **fields: Any) -> dict[str, Any]:
    """A valid memory body with overridable fields."""
    return {"user_id": user_id, "memory_type": "orchestrator", "content": {"note": "x"}, **fields}


async def test_write_defaults_category_and_level_from_the_type(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    response = await client.post(
        "/v1/memories", json=memory(user_id, memory_type="planning", content={"goal": "house"})
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["category"] == "agent_outputs"
    assert body["access_level"] == "coordination_manager"
    assert body["agent_name"] == "admin"
    assert body["version"] == 1
    assert body["content"] == {"goal": "house"}
    assert body["content_size"] == len(b'{"goal":"house"}')
    created = body["created_at"].replace("Z", "+00:00")
    expires = body["expires_at"].replace("Z", "+00:00")
    from datetime import datetime

    assert datetime.fromisoformat(expires) - datetime.fromisoformat(created) == timedelta(days=30)


async def test_unknown_type_falls_back_nowhere_but_types_without_mapping_use_session_data(
    client: httpx.AsyncClient,
) -> None:
    user_id = await create_user(client)
    body = assert_problem(
        await client.post("/v1/memories", json=memory(user_id, memory_type="telepathy")), 422
    )
    assert body["errors"] == [{"field": "memory_type", "message": "unknown memory type"}]
    orchestrator = (await client.post("/v1/memories", json=memory(user_id))).json()
    assert orchestrator["category"] == "session_data"
    assert orchestrator["access_level"] == "all_agents"


async def test_writing_agent_comes_from_the_key(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    user_id = await create_user(client)
    agent = await make_agent_client("Collect_Create_Data_Agent", ["authorized"])
    async with agent:
        response = await agent.post(
            "/v1/memories", json=memory(user_id, memory_type="data_collection")
        )
    assert response.status_code == 201, response.text
    assert response.json()["agent_name"] == "Collect_Create_Data_Agent"
    assert response.json()["category"] == "user_profile"
    assert response.json()["expires_at"] is None  # user_profile is permanent


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"memory_type": "orchestrator", "content": {}}, "user_id"),
        ({"content": {}}, "memory_type"),
        ({"memory_type": "orchestrator"}, "content"),
        ({"memory_type": "orchestrator", "content": None}, "content"),
        ({"memory_type": "orchestrator", "content": {}, "category": "nope"}, "category"),
        ({"memory_type": "orchestrator", "content": {}, "access_level": "nope"}, "access_level"),
        ({"memory_type": "orchestrator", "content": {}, "agent_name": "Spoof"}, "agent_name"),
        ({"memory_type": "orchestrator", "content": {}, "key": ""}, "key"),
    ],
)
async def test_missing_or_bad_fields_are_422_naming_the_field(
    client: httpx.AsyncClient, payload: dict[str, Any], field: str
) -> None:
    user_id = await create_user(client)
    if field != "user_id":
        payload = {"user_id": user_id, **payload}
    body = assert_problem(await client.post("/v1/memories", json=payload), 422)
    assert field in [error["field"] for error in body["errors"]], body


async def test_unknown_user_and_foreign_session_are_422(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    other_session = await create_session(client)
    body = assert_problem(
        await client.post(
            "/v1/memories", json=memory(user_id, session_id=other_session["session_id"])
        ),
        422,
    )
    assert body["errors"] == [{"field": "session_id", "message": "session belongs to another user"}]
    body = assert_problem(
        await client.post("/v1/memories", json=memory("01900000-0000-7000-8000-000000000000")),
        422,
    )
    assert body["errors"][0]["field"] == "user_id"


async def test_content_over_one_mebibyte_is_413(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    big = "x" * (1024 * 1024)
    response = await client.post("/v1/memories", json=memory(user_id, content=big))
    assert_problem(response, 413)
    listed = (await client.get("/v1/memories", params={"user_id": user_id})).json()
    assert listed["items"] == []


class TestContentLimit:
    @pytest.fixture
    def settings(self) -> Any:
        from app.settings import DatabaseSettings, MemorySettings, Settings

        return Settings(
            memories=MemorySettings(max_content_bytes=1000),
            database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        )

    async def test_the_limit_counts_serialized_bytes(self, client: httpx.AsyncClient) -> None:
        user_id = await create_user(client)
        fits = "x" * 998  # two quotes make 1000 bytes
        assert (
            await client.post("/v1/memories", json=memory(user_id, content=fits))
        ).status_code == 201
        body = assert_problem(
            await client.post("/v1/memories", json=memory(user_id, content=fits + "x")), 413
        )
        assert body["errors"] == [{"field": "content", "message": "1001 bytes"}]


MIB = 1024 * 1024


async def test_content_of_the_documented_limit_fits_through_every_write(
    client: httpx.AsyncClient,
) -> None:
    """1 MiB of content used to be refused with 413: the 1 MiB body limit counted the
    envelope too. The default body limit leaves room for it (BODY_ENVELOPE_BYTES)."""
    from app.settings import BODY_ENVELOPE_BYTES

    user_id = await create_user(client)
    largest = "x" * (MIB - 2)  # two quotes make 1 MiB serialized
    posted = await client.post("/v1/memories", json=memory(user_id, content=largest))
    assert posted.status_code == 201, posted.text[:300]
    assert posted.json()["content_size"] == MIB
    upsert = {"user_id": user_id, "category": "session_data", "key": "big", "content": largest}
    put = await client.put("/v1/memories/by-key", json={**upsert, "memory_type": "orchestrator"})
    assert put.status_code == 201, put.text[:300]
    hook = {
        "agent_name": "Orchestrator_Agent",
        "user_id": user_id,
        "memory_type": "orchestrator",
        "memory_content": largest,
    }
    assert (await client.post("/webhooks/n8n/memory", json=hook)).status_code == 200

    # One byte more is the content limit's 413, naming the field, not the body limit's.
    over = assert_problem(
        await client.post("/v1/memories", json=memory(user_id, content=largest + "x")), 413
    )
    assert over["errors"] == [{"field": "content", "message": f"{MIB + 1} bytes"}]
    # A batch is one body: together its contents fit in the body limit, each in its own.
    part = "x" * (MIB // 2 + BODY_ENVELOPE_BYTES // 2)
    batch = [memory(user_id, content=part), memory(user_id, content=part)]
    too_big = assert_problem(await client.post("/v1/memories", json=batch), 413)
    assert too_big["type"].endswith(":payload-too-large")
    body = b"[" + b" " * (MIB + BODY_ENVELOPE_BYTES) + b"]"
    assert_problem(
        await client.post(
            "/v1/memories", content=body, headers={"content-type": "application/json"}
        ),
        413,
    )
    assert len((await client.get("/v1/memories", params={"user_id": user_id})).json()["items"]) == 3


async def test_batch_is_all_or_nothing(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    good = [memory(user_id, content={"i": i}) for i in range(5)]
    bad = [*good[:3], memory(user_id, memory_type="telepathy"), *good[3:]]
    body = assert_problem(await client.post("/v1/memories", json=bad), 422)
    assert body["errors"] == [{"field": "3.memory_type", "message": "unknown memory type"}]
    assert (await client.get("/v1/memories", params={"user_id": user_id})).json()["items"] == []

    response = await client.post("/v1/memories", json=good)
    assert response.status_code == 201
    assert [m["content"]["i"] for m in response.json()["items"]] == [0, 1, 2, 3, 4]


async def test_batch_with_a_duplicate_key_writes_nothing(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    batch = [
        memory(user_id, key="risk", content=1),
        memory(user_id, key="other", content=2),
        memory(user_id, key="risk", content=3),
    ]
    body = assert_problem(await client.post("/v1/memories", json=batch), 409)
    assert body["errors"][0]["field"] == "2.key"
    assert (await client.get("/v1/memories", params={"user_id": user_id})).json()["items"] == []
    # Each insert writes its own audit row: the first two went back with the transaction.
    log = (await client.get("/v1/audit/memory", params={"limit": 200})).json()["items"]
    assert [e for e in log if e["action"] == "write" and e["allowed"]] == []


async def test_batch_size_bounds(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    assert_problem(await client.post("/v1/memories", json=[]), 422)
    too_many = [memory(user_id, content=i) for i in range(501)]
    assert_problem(await client.post("/v1/memories", json=too_many), 422)


async def test_upsert_by_key_creates_replaces_and_checks_versions(
    client: httpx.AsyncClient,
) -> None:
    user_id = await create_user(client)
    body = {
        "user_id": user_id,
        "category": "user_profile",
        "key": "risk_tolerance",
        "memory_type": "consultation",
        "content": {"level": "low"},
    }
    created = await client.put("/v1/memories/by-key", json=body)
    assert created.status_code == 201, created.text
    assert created.headers["etag"] == '"1"'
    replaced = await client.put(
        "/v1/memories/by-key",
        json={**body, "content": {"level": "medium"}},
        headers={"If-Match": '"1"'},
    )
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["version"] == 2
    assert replaced.json()["memory_id"] == created.json()["memory_id"]

    stale = await client.put(
        "/v1/memories/by-key",
        json={**body, "content": {"level": "high"}},
        headers={"If-Match": '"1"'},
    )
    problem = assert_problem(stale, 409)
    assert problem["current_version"] == 2
    exists = await client.put("/v1/memories/by-key", json=body, headers={"If-None-Match": "*"})
    assert_problem(exists, 409)
    current = (await client.get(f"/v1/memories/{created.json()['memory_id']}")).json()
    assert current["content"] == {"level": "medium"}

    last_write_wins = await client.put("/v1/memories/by-key", json={**body, "content": 3})
    assert last_write_wins.status_code == 200
    assert last_write_wins.json()["version"] == 3


async def test_post_with_a_taken_key_is_409(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    assert (await client.post("/v1/memories", json=memory(user_id, key="k"))).status_code == 201
    assert_problem(await client.post("/v1/memories", json=memory(user_id, key="k")), 409)


async def test_list_filters_and_keyset_pagination(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    session = await create_session(client, user_id=user_id)
    sid = session["session_id"]
    written = []
    for i in range(5):
        response = await client.post(
            "/v1/memories",
            json=memory(
                user_id, session_id=sid, content={"i": i, "tag": "even" if i % 2 == 0 else "odd"}
            ),
        )
        written.append(response.json()["memory_id"])
    await client.post(
        "/v1/memories", json=memory(user_id, memory_type="planning", content={"p": 1})
    )

    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"session_id": sid, "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/v1/memories", params=params)).json()
        seen += [m["memory_id"] for m in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(written))

    even = await client.get(
        "/v1/memories", params={"user_id": user_id, "contains": json.dumps({"tag": "even"})}
    )
    assert [m["content"]["i"] for m in even.json()["items"]] == [4, 2, 0]
    planning = await client.get(
        "/v1/memories", params={"user_id": user_id, "memory_type": "planning"}
    )
    assert [m["content"] for m in planning.json()["items"]] == [{"p": 1}]
    by_agent = await client.get("/v1/memories", params={"agent_name": "admin", "limit": 200})
    assert len(by_agent.json()["items"]) == 6
    by_content = await client.get("/v1/memories", params={"contains": json.dumps({"p": 1})})
    assert len(by_content.json()["items"]) == 1


class TestListFilters:
    """Every filter narrows every list, whichever index the list reads through (a session,
    a user, an agent or a containment search each lead their own statement)."""

    @pytest.fixture
    def clock(self, frozen_clock: FrozenClock) -> Clock:
        return frozen_clock

    async def test_each_filter_narrows_each_list(
        self, client: httpx.AsyncClient, frozen_clock: FrozenClock, make_agent_client: Any
    ) -> None:
        first, second = await create_user(client), await create_user(client)
        first_a = (await create_session(client, user_id=first))["session_id"]
        first_b = (await create_session(client, user_id=first))["session_id"]
        second_a = (await create_session(client, user_id=second))["session_id"]
        agent = await make_agent_client("Filter_Agent", [])
        written: list[dict[str, Any]] = []
        async with agent:
            for i, (writer, user, session, memory_type) in enumerate(
                [
                    (client, first, first_a, "orchestrator"),
                    (agent, first, first_a, "planning"),
                    (client, first, first_b, "data_collection"),
                    (agent, first, None, "orchestrator"),
                    (client, second, second_a, "planning"),
                    (agent, second, second_a, "orchestrator"),
                    (client, second, None, "data_collection"),
                    (agent, first, first_b, "planning"),
                ]
            ):
                frozen_clock.advance(timedelta(minutes=1))
                body = memory(
                    user, memory_type=memory_type, content={"i": i, "tag": ("even", "odd")[i % 2]}
                )
                if session is not None:
                    body["session_id"] = session
                response = await writer.post("/v1/memories", json=body)
                assert response.status_code == 201, response.text
                written.append(response.json())
        since = written[3]["created_at"]
        leading: dict[str, Any] = {
            "session_id": first_b,
            "user_id": first,
            "agent_name": "Filter_Agent",
            "contains": {"tag": "even"},
        }
        narrowing: dict[str, Any] = {
            "user_id": second,
            "session_id": first_a,
            "agent_name": "admin",
            "memory_type": "planning",
            "category": "session_data",
            "since": since,
            "contains": {"tag": "odd"},
        }

        def matches(m: dict[str, Any], filters: dict[str, Any]) -> bool:
            for name, value in filters.items():
                if name == "contains":
                    if not value.items() <= m["content"].items():
                        return False
                elif name == "since":
                    if m["created_at"] < value:
                        return False
                elif m[name] != value:
                    return False
            return True

        for lead, lead_value in leading.items():
            for name, value in [(None, None), *narrowing.items()]:
                filters = {lead: lead_value} if name is None else {lead: lead_value, name: value}
                params = {k: json.dumps(v) if k == "contains" else v for k, v in filters.items()}
                response = await client.get("/v1/memories", params=params)
                assert response.status_code == 200, (filters, response.text)
                expected = [m["content"]["i"] for m in reversed(written) if matches(m, filters)]
                listed = [m["content"]["i"] for m in response.json()["items"]]
                assert listed == expected, filters
                if name is None:
                    assert expected, f"{lead} alone must list something"


async def test_list_errors(client: httpx.AsyncClient) -> None:
    assert_problem(await client.get("/v1/memories"), 422)
    user_id = await create_user(client)
    assert_problem(
        await client.get("/v1/memories", params={"user_id": user_id, "contains": "{"}), 400
    )
    assert_problem(
        await client.get("/v1/memories", params={"user_id": user_id, "contains": "3"}), 400
    )
    assert_problem(
        await client.get(
            "/v1/memories", params={"user_id": user_id, "since": "2026-01-01T00:00:00"}
        ),
        400,
    )
    assert_problem(await client.get("/v1/memories", params={"user_id": "nope"}), 400)


async def test_delete_and_unknown_memory(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    created = (await client.post("/v1/memories", json=memory(user_id))).json()
    url = f"/v1/memories/{created['memory_id']}"
    assert (await client.delete(url)).status_code == 204
    assert_problem(await client.get(url), 404)
    assert_problem(await client.delete(url), 404)


class TestRetention:
    @pytest.fixture
    def clock(self, frozen_clock: FrozenClock) -> Clock:
        return frozen_clock

    async def test_expired_memories_vanish_from_every_read_and_permanent_ones_stay(
        self, client: httpx.AsyncClient, frozen_clock: FrozenClock
    ) -> None:
        user_id = await create_user(client)
        session = await create_session(client, user_id=user_id)
        short = (
            await client.post(
                "/v1/memories", json=memory(user_id, session_id=session["session_id"])
            )
        ).json()
        permanent = (
            await client.post(
                "/v1/memories",
                json=memory(user_id, memory_type="data_collection", content={"income": 1}),
            )
        ).json()
        assert short["category"] == "session_data"

        frozen_clock.advance(timedelta(hours=23, minutes=59))
        assert (await client.get(f"/v1/memories/{short['memory_id']}")).status_code == 200

        frozen_clock.advance(timedelta(minutes=2))  # 24 h 1 min after the write
        assert_problem(await client.get(f"/v1/memories/{short['memory_id']}"), 404)
        assert_problem(await client.delete(f"/v1/memories/{short['memory_id']}"), 404)
        listed = (await client.get("/v1/memories", params={"user_id": user_id})).json()
        assert [m["memory_id"] for m in listed["items"]] == [permanent["memory_id"]]
        context = (await client.get(f"/v1/sessions/{session['session_id']}/context")).json()
        assert [m["memory_id"] for m in context["memories"]] == [permanent["memory_id"]]

        frozen_clock.advance(timedelta(days=3650))
        assert (await client.get(f"/v1/memories/{permanent['memory_id']}")).status_code == 200

    async def test_rewriting_by_key_restarts_the_retention_clock(
        self, client: httpx.AsyncClient, frozen_clock: FrozenClock
    ) -> None:
        user_id = await create_user(client)
        body = {
            "user_id": user_id,
            "category": "session_data",
            "key": "topic",
            "memory_type": "orchestrator",
            "content": "budget",
        }
        first = (await client.put("/v1/memories/by-key", json=body)).json()
        frozen_clock.advance(timedelta(hours=20))
        second = (await client.put("/v1/memories/by-key", json=body)).json()
        assert second["expires_at"] != first["expires_at"]
        frozen_clock.advance(timedelta(hours=20))
        assert (await client.get(f"/v1/memories/{first['memory_id']}")).status_code == 200

    async def test_changed_retention_applies_to_later_writes_or_to_all_with_reapply(
        self, client: httpx.AsyncClient, frozen_clock: FrozenClock
    ) -> None:
        user_id = await create_user(client)
        before = (await client.post("/v1/memories", json=memory(user_id))).json()
        change = {"retention_seconds": 3600, "default_access_level": "all_agents"}
        response = await client.put("/v1/memory-categories/session_data", json=change)
        assert response.status_code == 200, response.text
        assert response.json()["memories_reexpired"] is None
        assert response.json()["category"]["retention_seconds"] == 3600
        after = (await client.post("/v1/memories", json=memory(user_id))).json()

        frozen_clock.advance(timedelta(hours=2))
        assert (await client.get(f"/v1/memories/{before['memory_id']}")).status_code == 200
        assert_problem(await client.get(f"/v1/memories/{after['memory_id']}"), 404)

        reapplied = await client.put(
            "/v1/memory-categories/session_data", params={"reapply": "true"}, json=change
        )
        assert reapplied.json()["memories_reexpired"] == 1
        assert_problem(await client.get(f"/v1/memories/{before['memory_id']}"), 404)

    async def test_an_expired_memory_is_absent_for_writes_by_key_too(
        self, client: httpx.AsyncClient, frozen_clock: FrozenClock
    ) -> None:
        user_id = await create_user(client)
        body = {
            "user_id": user_id,
            "category": "session_data",
            "key": "topic",
            "memory_type": "orchestrator",
            "content": "budget",
        }
        first = (await client.put("/v1/memories/by-key", json=body)).json()
        posted = (await client.post("/v1/memories", json={**body, "key": "mood"})).json()
        frozen_clock.advance(timedelta(hours=25))  # both past their 24 h

        # If-Match cannot name a version of a memory that is gone...
        stale = assert_problem(
            await client.put("/v1/memories/by-key", json=body, headers={"If-Match": '"1"'}), 409
        )
        assert stale["current_version"] is None
        # ...and a write by key creates a new memory, as if the key had never been used.
        again = await client.put("/v1/memories/by-key", json={**body, "content": "savings"})
        assert again.status_code == 201, again.text
        assert again.json()["memory_id"] != first["memory_id"]
        assert again.json()["version"] == 1
        assert_problem(await client.get(f"/v1/memories/{first['memory_id']}"), 404)
        reposted = await client.post("/v1/memories", json={**body, "key": "mood"})
        assert reposted.status_code == 201, reposted.text
        assert reposted.json()["memory_id"] != posted["memory_id"]
        created_only = await client.put(
            "/v1/memories/by-key",
            json={**body, "key": "mood", "content": 1},
            headers={"If-None-Match": "*"},
        )
        assert_problem(created_only, 409)  # the new "mood" is live

    async def test_an_expired_interaction_pattern_replaced_by_key_is_archived_first(
        self, client: httpx.AsyncClient, frozen_clock: FrozenClock, database_url: str
    ) -> None:
        user_id = await create_user(client)
        body = {
            "user_id": user_id,
            "category": "interaction_patterns",
            "key": "weekday_usage",
            "memory_type": "intent_session",
            "content": {"monday": 3},
        }
        first = (await client.put("/v1/memories/by-key", json=body)).json()
        frozen_clock.advance(timedelta(days=366))
        again = await client.put("/v1/memories/by-key", json={**body, "content": {"monday": 1}})
        assert again.status_code == 201, again.text
        conn = await asyncpg.connect(database_url)
        try:
            archived = await conn.fetch("SELECT memory_id, content FROM memory_archive")
        finally:
            await conn.close()
        # What the retention job would have done with it: kept in the archive for a year.
        assert [(str(a["memory_id"]), a["content"]) for a in archived] == [
            (first["memory_id"], '{"monday": 3}')
        ]


async def test_categories_types_and_levels(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    categories = (await client.get("/v1/memory-categories")).json()
    assert {c["name"]: (c["retention_seconds"], c["default_access_level"]) for c in categories} == {
        "session_data": (86400, "all_agents"),
        "user_profile": (None, "authorized_agents"),
        "interaction_patterns": (365 * 86400, "analytics_agents"),
        "agent_outputs": (30 * 86400, "coordination_manager"),
    }
    assert (await client.get("/v1/memory-categories/user_profile")).json()[
        "retention_seconds"
    ] is None
    assert_problem(await client.get("/v1/memory-categories/nope"), 404)
    created = await client.put(
        "/v1/memory-categories/compliance_logs",
        json={"retention_seconds": None, "default_access_level": "authorized_agents"},
    )
    assert created.json()["created"] is True
    assert_problem(
        await client.put("/v1/memory-categories/x", json={"default_access_level": "everyone"}),
        422,
    )
    for retention in (59, 100 * 365 * 86400 + 1, 10**20):  # found by the fuzzer: 10**20 was a 500
        assert_problem(
            await client.put(
                "/v1/memory-categories/x",
                json={"retention_seconds": retention, "default_access_level": "all_agents"},
            ),
            422,
        )
    longest = await client.put(
        "/v1/memory-categories/centennial",
        json={"retention_seconds": 100 * 365 * 86400, "default_access_level": "all_agents"},
    )
    assert longest.status_code in (200, 201), longest.text
    assert_problem(
        await client.put(
            "/v1/memory-categories/Bad-Name", json={"default_access_level": "all_agents"}
        ),
        400,
    )

    types = {
        t["name"]: t["default_category"] for t in (await client.get("/v1/memory-types")).json()
    }
    assert types["planning"] == "agent_outputs"
    assert len(types) == 7
    added = await client.post(
        "/v1/memory-types", json={"name": "compliance", "default_category": "compliance_logs"}
    )
    assert added.status_code == 201
    assert_problem(
        await client.post(
            "/v1/memory-types", json={"name": "compliance", "default_category": "user_profile"}
        ),
        409,
    )
    assert_problem(
        await client.post("/v1/memory-types", json={"name": "x", "default_category": "nope"}), 422
    )
    levels = (await client.get("/v1/memory-access-levels")).json()
    assert {lv["level"]: lv["required_role"] for lv in levels}["analytics_agents"] == "analytics"

    agent = await make_agent_client("Reader", [])
    async with agent:
        assert (await agent.get("/v1/memory-categories")).status_code == 200
        assert_problem(
            await agent.put(
                "/v1/memory-categories/session_data", json={"default_access_level": "all_agents"}
            ),
            403,
        )
        assert_problem(
            await agent.post(
                "/v1/memory-types", json={"name": "y", "default_category": "user_profile"}
            ),
            403,
        )


async def test_session_context_respects_limit_and_byte_budget(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    session = await create_session(client, user_id=user_id)
    other = await create_session(client, user_id=user_id)
    sid = session["session_id"]
    await client.post("/v1/memories", json=memory(user_id, content="user-level"))
    await client.post(
        "/v1/memories", json=memory(user_id, session_id=other["session_id"], content="other")
    )
    for i in range(3):
        await client.post(
            "/v1/memories", json=memory(user_id, session_id=sid, content="x" * 98 + str(i))
        )

    full = (await client.get(f"/v1/sessions/{sid}/context")).json()
    assert full["session"]["session_id"] == sid
    assert [m["content"] for m in full["memories"]][-1] == "user-level"
    assert "other" not in [m["content"] for m in full["memories"]]
    assert full["truncated"] is False
    assert len(full["memories"]) == 4

    budget = (await client.get(f"/v1/sessions/{sid}/context", params={"max_bytes": 250})).json()
    assert len(budget["memories"]) == 2
    assert budget["memory_bytes"] == 202
    assert budget["truncated"] is True
    limited = (await client.get(f"/v1/sessions/{sid}/context", params={"limit": 1})).json()
    assert len(limited["memories"]) == 1
    assert limited["truncated"] is True
    assert_problem(
        await client.get("/v1/sessions/01900000-0000-7000-8000-000000000000/context"), 404
    )


async def test_erase_user_memories(client: httpx.AsyncClient, make_agent_client: Any) -> None:
    user_id = await create_user(client)
    keep = await create_user(client)
    for _ in range(3):
        await client.post("/v1/memories", json=memory(user_id))
    await client.post("/v1/memories", json=memory(keep))
    response = await client.delete(f"/v1/users/{user_id}/memories")
    body = response.json()
    assert body.pop("erasure_id")
    assert body == {
        "user_id": user_id,
        "memories_deleted": 3,
        "archived_deleted": 0,
        "deleted": {
            "memories": 3,
            "memory_archive": 0,
            "branch_memories": 0,
            "idempotency_keys": 0,
            "outbox_events": 0,
            "event_deliveries": 0,
        },
        # The three writes were audited by memory id: the ids go, the rows stay.
        "redacted": {"memory_access_log": 3, "job_runs": 0},
    }
    assert (await client.get("/v1/memories", params={"user_id": user_id})).json()["items"] == []
    assert len((await client.get("/v1/memories", params={"user_id": keep})).json()["items"]) == 1
    assert_problem(
        await client.delete("/v1/users/01900000-0000-7000-8000-000000000000/memories"), 404
    )
    agent = await make_agent_client("Eraser", ["coordination_manager"])
    async with agent:
        assert_problem(await agent.delete(f"/v1/users/{keep}/memories"), 403)


async def test_user_delete_cascades_to_memories(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    created = (await client.post("/v1/memories", json=memory(user_id))).json()
    assert (await client.delete(f"/v1/users/{user_id}")).status_code == 200
    assert_problem(await client.get(f"/v1/memories/{created['memory_id']}"), 404)


UNKNOWN_ID = "01900000-0000-7000-8000-000000000000"


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"memory_type": "planning"},
        {"category": "user_profile", "access_level": "authorized_agents"},
        {"session_id": "own"},
        {"memory_type": "telepathy"},
        {"category": "nope"},
        {"access_level": "nope"},
        {"memory_type": "telepathy", "category": "nope", "access_level": "nope"},
        {"category": ""},
        {"access_level": ""},
        {"session_id": "other"},
        {"session_id": UNKNOWN_ID},
        {"user_id": UNKNOWN_ID, "session_id": "own"},
    ],
)
async def test_a_single_write_is_checked_as_a_batch_of_one_is(
    client: httpx.AsyncClient, fields: dict[str, str]
) -> None:
    """A single memory is checked and inserted by one statement (insert_checked_memory), a
    batch by the service's own checks first: both store, or refuse, the same memory alike."""
    user_id = await create_user(client)
    sessions = {
        "own": (await create_session(client, user_id=user_id))["session_id"],
        "other": (await create_session(client))["session_id"],
    }
    body = {**memory(user_id), **{k: sessions.get(v, v) for k, v in fields.items()}}
    single = await client.post("/v1/memories", json=body)
    batch = await client.post("/v1/memories", json=[body])
    if single.status_code == 201:
        assert batch.status_code == 201, batch.text
        stored = batch.json()["items"][0]
        written = single.json()
        same = ("user_id", "session_id", "memory_type", "category", "access_level", "content")
        assert {k: written[k] for k in same} == {k: stored[k] for k in same}
        return
    assert single.status_code == batch.status_code == 422, (single.text, batch.text)
    one, many = single.json(), batch.json()
    # A batch names each item's fields by its index (and its detail speaks of items).
    assert one["errors"] == [
        {**error, "field": error["field"].removeprefix("0.")} for error in many["errors"]
    ]
    listed = await client.get("/v1/memories", params={"user_id": body["user_id"]})
    assert listed.status_code in (200, 404)
    assert listed.status_code == 404 or listed.json()["items"] == []
