"""The migrations produce exactly sql/schema.sql, and downgrade/upgrade round-trips."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.db.migrate import downgrade, upgrade
from app.db.queries import parse_named_queries
from app.settings import PROJECT_ROOT
from tests import dbutil

SNAPSHOT = parse_named_queries((Path(__file__).parent / "snapshot.sql").read_text(), "snapshot.sql")
CATALOG = ("columns", "constraints", "indexes", "functions", "seed_rows")


@pytest.fixture
async def fresh_database(server_url: str) -> AsyncIterator[Callable[[], Any]]:
    """Factory of empty databases, all dropped at the end."""
    names: list[str] = []

    async def make() -> str:
        name = dbutil.unique_name("sbtest_mig")
        await dbutil.create_database(server_url, name)
        names.append(name)
        return dbutil.with_database(server_url, name)

    yield make
    for name in names:
        await dbutil.drop_database(server_url, name)


async def snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    conn = await asyncpg.connect(url)
    try:
        return {name: [tuple(r) for r in await conn.fetch(SNAPSHOT[name])] for name in CATALOG}
    finally:
        await conn.close()


def diff(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> str:
    only_a = [row for row in a if row not in b]
    only_b = [row for row in b if row not in a]
    return f"only in migrations: {only_a[:5]}\nonly in schema.sql: {only_b[:5]}"


async def test_migrations_produce_exactly_the_canonical_schema(fresh_database: Any) -> None:
    migrated = await fresh_database()
    canonical = await fresh_database()
    await asyncio.to_thread(upgrade, migrated)
    conn = await asyncpg.connect(canonical)
    try:
        await conn.execute((PROJECT_ROOT / "sql" / "schema.sql").read_text())
    finally:
        await conn.close()
    left, right = await snapshot(migrated), await snapshot(canonical)
    for part in CATALOG:
        assert left[part] == right[part], f"{part} differ:\n{diff(left[part], right[part])}"
    assert left["columns"], "the snapshot saw no tables at all"


async def test_downgrade_to_base_then_upgrade_round_trips(fresh_database: Any) -> None:
    url = await fresh_database()
    await asyncio.to_thread(upgrade, url)
    before = await snapshot(url)
    await asyncio.to_thread(downgrade, url, "base")
    conn = await asyncpg.connect(url)
    try:
        assert [r[0] for r in await conn.fetch(SNAPSHOT["public_tables"])] == ["alembic_version"]
        assert await conn.fetch(SNAPSHOT["public_functions"]) == []
    finally:
        await conn.close()
    await asyncio.to_thread(upgrade, url)
    assert await snapshot(url) == before


async def test_every_uuid_primary_key_defaults_to_uuid_v7(fresh_database: Any) -> None:
    url = await fresh_database()
    await asyncio.to_thread(upgrade, url)
    conn = await asyncpg.connect(url)
    try:
        defaults = {
            (r["table_name"], r["attname"]): r["default_expr"]
            for r in await conn.fetch(SNAPSHOT["columns"])
        }
        single_uuid_keys = await conn.fetch(
            "SELECT c.relname, a.attname FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0]"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE i.indisprimary AND i.indnatts = 1 AND n.nspname = 'public'"
            " AND a.atttypid = 'uuid'::regtype"
        )
        generated = [k for k in single_uuid_keys if defaults[(k[0], k[1])] is not None]
        assert generated, "no generated uuid keys found"
        for table, column in generated:
            assert defaults[(table, column)] == "uuid_generate_v7()", (table, column)
        values = [
            r[0]
            for r in await conn.fetch("SELECT uuid_generate_v7() FROM generate_series(1, 1000)")
        ]
        now_ms = await conn.fetchval(
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
        )
    finally:
        await conn.close()
    assert len(set(values)) == 1000
    parsed = [uuid.UUID(str(v)) for v in values]
    assert {u.version for u in parsed} == {7}
    assert {u.variant for u in parsed} == {uuid.RFC_4122}
    millis = [u.int >> 80 for u in parsed]
    assert millis == sorted(millis)  # time-ordered prefix
    assert abs(millis[-1] - int(now_ms)) < 5000
