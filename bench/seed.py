"""Sessions aged for a benchmark: an agent sequence of ``STEPS`` stored executions.

A long-running deployment's sessions sit at the sequence cap (100 executions, the
``SWITCHBOARD_SESSION_AGENT_SEQUENCE_LIMIT`` default) while a fresh benchmark's have a few;
what a write does with the steps it does not touch shows only on the former. The steps are
written straight into the column, shaped as the service stores a fallback's step.
"""

from __future__ import annotations

import os

import asyncpg

SEED_SEQUENCE = """
UPDATE session_coordination
SET agent_sequence = (
    SELECT jsonb_agg(jsonb_build_object(
        'agent_name', 'Educate_Customer_Agent',
        'execution_order', n,
        'status', 'failed',
        'start_time', '2026-11-25T12:00:00Z',
        'completion_time', '2026-11-25T12:00:00Z',
        'output_summary', 'I cannot reach the specialist for this right now; here is what '
                          'I can tell you from the general guidance while it is away.',
        'next_agent', NULL
    ) ORDER BY n)
    FROM generate_series(1, $1::int) n
)
"""


def steps_wanted() -> int:
    """The ``STEPS`` environment variable (default 0: sessions as created)."""
    return int(os.environ.get("STEPS", "0"))


async def seed_agent_sequences(url: str, steps: int) -> None:
    """Give every session ``steps`` stored executions (nothing when ``steps`` is 0)."""
    if steps <= 0:
        return
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(SEED_SEQUENCE, steps)
    finally:
        await conn.close()
