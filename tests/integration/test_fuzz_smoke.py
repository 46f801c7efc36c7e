"""A small schemathesis run inside make test: every operation, as the admin and as an
agent, against a real server process on this test's database; no 5xx, and no answer the
OpenAPI document does not describe (status, content type, headers, body). The full drill
(thousands of cases) is `make drills`."""

from __future__ import annotations

import asyncio

import pytest

from drills.fuzz import run


@pytest.mark.slow
async def test_no_operation_answers_5xx_to_generated_input(database_url: str) -> None:
    # The coverage phase is left to the drill: schemathesis 4.32 sometimes crashes in it
    # (its own KeyError), which says nothing about the server.
    result = await asyncio.to_thread(run, database_url, 3, "examples,fuzzing")
    for who, outcome in result.items():
        assert outcome["cases"] > 100, (who, outcome)
        assert outcome["server_errors"] == [], (who, outcome)
        assert outcome["undocumented"] == [], (who, outcome)
