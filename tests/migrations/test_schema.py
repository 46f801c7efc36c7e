"""The migrations build exactly sql/schema.sql, revert cleanly, and key rows by UUIDv7.

Every test works on empty databases of its own (cloned from template0, so nothing a
server's template1 holds can leak into the comparison) and drops them when it ends.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
from alembic.script import ScriptDirectory

from app.db.migrate import alembic_config, downgrade, upgrade
from app.db.queries import parse_named_queries
from app.settings import PROJECT_ROOT
from tests import dbutil

CATALOG_FILE = Path(__file__).with_name("catalog.sql")
CATALOG = parse_named_queries(CATALOG_FILE.read_text(encoding="utf-8"), CATALOG_FILE.name)
SCHEMA_SQL = PROJECT_ROOT / "sql" / "schema.sql"

# The parts of the catalog two equal schemas agree on, row for row.
CATALOG_PARTS = (
    "tables",
    "columns",
    "constraints",
    "indexes",
    "statistics",
    "functions",
    "triggers",
    "views",
    "sequences",
    "types",
    "domain_constraints",
    "extensions",
)
# ...and the reference rows the migrations seed (which need the tables to exist).
SNAPSHOT_PARTS = (*CATALOG_PARTS, "seed_rows")

# Tables every head schema has: guards against two snapshots agreeing because both are empty.
CORE_TABLES = {
    "users",
    "session_coordination",
    "session_state_versions",
    "agents",
    "memories",
    "job_runs",
    "idempotency_keys",
    "agent_tasks",
    "dead_letters",
    "a2a_push_configs",
}

# Tables keyed by a generated uuid: the uuid-key check must see at least these.
GENERATED_KEY_TABLES = {
    "users",
    "session_coordination",
    "agents",
    "memories",
    "memory_access_log",
    "coordination_decisions",
    "job_runs",
    "subscriptions",
    "outbox_events",
    "user_erasures",
    "agent_tasks",
    "dead_letters",
}

# Archives keep the id of the live row they were copied from, so their keys have no default.
COPIED_UUID_KEYS = {("memory_archive", "memory_id"), ("session_archive", "session_id")}

Row = tuple[Any, ...]
Snapshot = dict[str, list[Row]]


@asynccontextmanager
async def empty_database(server_url: str) -> AsyncIterator[str]:
    """A brand-new database of this test's own; dropped however the test ends."""
    name = dbutil.unique_name("sbtest_schema")
    await dbutil.create_database(server_url, name, template="template0")
    try:
        yield dbutil.with_database(server_url, name)
    finally:
        await dbutil.drop_database(server_url, name)


def frozen(value: Any) -> Any:
    """Arrays come back as lists; make rows hashable so they can be counted."""
    if isinstance(value, list):
        return tuple(frozen(item) for item in value)
    return value


async def fetch_rows(conn: asyncpg.Connection, query: str) -> list[Row]:
    """Run one named catalog query and return plain tuples."""
    return [tuple(frozen(value) for value in record) for record in await conn.fetch(CATALOG[query])]


async def snapshot(url: str, parts: tuple[str, ...] = SNAPSHOT_PARTS) -> Snapshot:
    """The catalog of schema public (and its seeded rows), part by part."""
    conn = await asyncpg.connect(url)
    try:
        return {part: await fetch_rows(conn, part) for part in parts}
    finally:
        await conn.close()


async def migrate_to_head(url: str) -> None:
    """``alembic upgrade head`` (blocking: it runs its own event loop in a thread)."""
    await asyncio.to_thread(upgrade, url)


async def load_schema_sql(url: str) -> None:
    """Execute sql/schema.sql as one script, the way a fresh install would."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(SCHEMA_SQL.read_text(encoding="utf-8"))
    finally:
        await conn.close()


def describe_differences(left: Snapshot, right: Snapshot, left_name: str, right_name: str) -> str:
    """Every row that one snapshot has and the other lacks, part by part."""
    lines: list[str] = []
    for part in left:
        left_rows, right_rows = Counter(left[part]), Counter(right[part])
        only_left = sorted((left_rows - right_rows).elements(), key=repr)
        only_right = sorted((right_rows - left_rows).elements(), key=repr)
        if not only_left and not only_right:
            if left[part] != right[part]:
                lines.append(f"[{part}] same rows in a different order")
            continue
        lines.append(f"[{part}]")
        lines.extend(f"  only in {left_name}: {row!r}" for row in only_left)
        lines.extend(f"  only in {right_name}: {row!r}" for row in only_right)
    return "\n".join(lines)


def assert_same_schema(left: Snapshot, right: Snapshot, left_name: str, right_name: str) -> None:
    """Equal snapshots, or a message naming each differing row."""
    assert left == right, "schemas differ:\n" + describe_differences(
        left, right, left_name, right_name
    )


def table_names(snap: Snapshot) -> set[str]:
    """Tables a snapshot saw."""
    return {row[0] for row in snap["tables"]}


def head_revision(url: str) -> str:
    """The newest revision in migrations/versions."""
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    assert head is not None
    return head


async def test_upgrade_head_builds_exactly_schema_sql(server_url: str) -> None:
    async with empty_database(server_url) as migrated, empty_database(server_url) as canonical:
        await migrate_to_head(migrated)
        await load_schema_sql(canonical)
        from_migrations, from_schema_sql = await snapshot(migrated), await snapshot(canonical)
        conn = await asyncpg.connect(migrated)
        try:
            applied = await fetch_rows(conn, "applied_revisions")
        finally:
            await conn.close()

    assert applied == [(head_revision(migrated),)]
    assert table_names(from_migrations) >= CORE_TABLES, table_names(from_migrations)
    assert "alembic_version" not in table_names(from_migrations)
    assert [row[0] for row in from_migrations["functions"]] == [
        "agent_shown",
        "agent_task_dead_lettered",
        "agent_task_held",
        "agent_task_queued",
        "agent_task_transition",
        "agent_tasks_claim",
        "agent_tasks_claim_lock",
        "agents_changed",
        "announce_after_commit",
        "branch_memory_readable",
        "current_traceparent",
        "event_subscribed",
        "idempotency_key_claimable",
        "idempotency_key_lapsed",
        "job_run_lapsed",
        "jsonb_mentions_any",
        "jsonb_or_null",
        "memory_access_lapsed",
        "memory_archive_lapsed",
        "memory_archived",
        "memory_archived_when_expired",
        "memory_expired_to_archive",
        "memory_expired_to_delete",
        "memory_list_rows",
        "memory_live",
        "memory_purged_notice",
        "memory_readable",
        "memory_readable_levels",
        "memory_visible",
        "memory_write_category",
        "memory_write_reference",
        "outbox_events_settled",
        "outbox_fan_out",
        "outbox_sequence",
        "outbox_sequence_from",
        "outbox_sequence_lock",
        "replica_is_present",
        "replica_lock_space",
        "session_archivable",
        "session_archive_lapsed",
        "session_archive_move",
        "session_branch_idle",
        "session_branch_version",
        "session_completed_cancels_held",
        "session_escalate",
        "session_expired",
        "session_expiring",
        "session_extendable",
        "session_goes_idle",
        "session_may_lapse",
        "session_open",
        "session_running",
        "session_version",
        "session_version_escalated",
        "session_version_told",
        "subscription_wants",
        "uuid_generate_v7",
    ]
    assert [row[:2] for row in from_migrations["triggers"]] == [
        ("agent_tasks", "agent_tasks_created"),
        ("agent_tasks", "agent_tasks_queued"),
        ("agent_tasks", "agent_tasks_transition"),
        ("agents", "agents_changed"),
        ("outbox_events", "outbox_events_fan_out"),
        ("session_coordination", "session_coordination_completed_escalated"),
        ("session_state_versions", "session_state_versions_escalated"),
        ("session_state_versions", "session_state_versions_told"),
    ]
    assert [row[:2] for row in from_migrations["statistics"]] == [
        ("session_coordination", "session_coordination_active_process_stats"),
    ]
    assert_same_schema(from_migrations, from_schema_sql, "migrations", "schema.sql")


async def test_downgrade_to_base_removes_everything_and_upgrade_rebuilds_it(
    server_url: str,
) -> None:
    async with empty_database(server_url) as url, empty_database(server_url) as canonical:
        await load_schema_sql(canonical)
        from_schema_sql = await snapshot(canonical)

        await migrate_to_head(url)
        first_upgrade = await snapshot(url)
        await asyncio.to_thread(downgrade, url, "base")

        after_downgrade = await snapshot(url, CATALOG_PARTS)
        conn = await asyncpg.connect(url)
        try:
            relations = await fetch_rows(conn, "public_relations")
            functions = await fetch_rows(conn, "public_functions")
            types = await fetch_rows(conn, "public_types")
            versions = await fetch_rows(conn, "applied_revisions")
        finally:
            await conn.close()

        await migrate_to_head(url)
        second_upgrade = await snapshot(url)

    # Only alembic's table (with its own key index) survives a downgrade to base.
    assert [name for name, kind in relations if kind != "i"] == ["alembic_version"], relations
    assert functions == []
    assert types == []
    assert versions == []
    leftovers = {part: rows for part, rows in after_downgrade.items() if rows}
    assert leftovers == {}, f"left behind by downgrade to base: {leftovers}"

    assert table_names(second_upgrade) >= CORE_TABLES
    assert_same_schema(second_upgrade, first_upgrade, "second upgrade", "first upgrade")
    assert_same_schema(second_upgrade, from_schema_sql, "second upgrade", "schema.sql")


async def test_uuid_primary_keys_default_to_uuid_v7(server_url: str) -> None:
    async with empty_database(server_url) as url:
        await migrate_to_head(url)
        conn = await asyncpg.connect(url)
        try:
            keys = await fetch_rows(conn, "single_column_uuid_primary_keys")
            before_ms = time.time_ns() // 1_000_000
            generated = await conn.fetch(CATALOG["uuid_v7_series"], 1000)
            after_ms = time.time_ns() // 1_000_000
            spaced: list[uuid.UUID] = []
            for _ in range(5):
                spaced.append(uuid.UUID(str(await conn.fetchval(CATALOG["uuid_v7"]))))
                await asyncio.sleep(0.002)
        finally:
            await conn.close()

    key_columns = {(table, column) for table, column, _ in keys}
    assert key_columns >= COPIED_UUID_KEYS, "an exempted archive table is gone: update the list"
    assert {table for table, _ in key_columns} >= GENERATED_KEY_TABLES, key_columns
    for table, column, default in keys:
        expected = None if (table, column) in COPIED_UUID_KEYS else "uuid_generate_v7()"
        assert default == expected, f"{table}.{column} defaults to {default!r}"

    values = [uuid.UUID(str(record["id"])) for record in generated]
    assert [record["n"] for record in generated] == list(range(1, 1001))
    assert len(set(values)) == 1000
    assert {value.version for value in values} == {7}
    assert {value.variant for value in values} == {uuid.RFC_4122}
    millis = [value.int >> 80 for value in values]
    assert all(before_ms - 5000 <= ms <= after_ms + 5000 for ms in millis), (
        before_ms,
        millis[0],
        millis[-1],
        after_ms,
    )
    # Within one millisecond the random tail is unordered; only the time prefix must not fall.
    assert all(earlier <= later for earlier, later in itertools.pairwise(millis))

    # Values from different milliseconds sort by time whether compared as text or as bytes.
    assert [value.int >> 80 for value in spaced] == sorted({value.int >> 80 for value in spaced})
    assert [str(value) for value in spaced] == sorted(str(value) for value in spaced)
    assert [value.bytes for value in spaced] == sorted(value.bytes for value in spaced)
    assert spaced[0].int >> 80 >= millis[-1]


async def test_expired_is_no_longer_a_session_status(server_url: str) -> None:
    """Revision no_expired_status takes 'expired' out of the status CHECK; a row holding it
    (only ever written by hand) becomes 'active', as a restore would make it."""
    async with empty_database(server_url) as url:
        script = ScriptDirectory.from_config(alembic_config(url))
        (revision,) = [
            rev for rev in script.walk_revisions() if rev.path.endswith("_no_expired_status.py")
        ]
        assert isinstance(revision.down_revision, str)
        await asyncio.to_thread(upgrade, url, revision.down_revision)
        conn = await asyncpg.connect(url)
        try:
            user = await conn.fetchval("INSERT INTO users DEFAULT VALUES RETURNING id")
            session = await conn.fetchval(
                "INSERT INTO session_coordination (user_id, status) VALUES ($1, 'expired')"
                " RETURNING session_id",
                user,
            )
            await asyncio.to_thread(upgrade, url, revision.revision)
            status = await conn.fetchval(
                "SELECT status FROM session_coordination WHERE session_id = $1", session
            )
            try:
                await conn.execute(
                    "UPDATE session_coordination SET status = 'expired' WHERE session_id = $1",
                    session,
                )
                refused = False
            except asyncpg.CheckViolationError:
                refused = True
        finally:
            await conn.close()
    assert status == "active"
    assert refused
