"""Messages on a branch of a session, with real agents on 127.0.0.1: the turn is the
branch's (its version, its memories, a decision naming it), main is untouched until the
branch merges, a late answer lands on the branch, a failed agent's fallback answers on the
branch, and bad requests are 4xx problems."""

from __future__ import annotations

from typing import Any

import httpx

from tests.agent_server import AgentServer
from tests.integration import agent_tasks
from tests.integration.agent_tasks import (
    PLAN,
    PLAN_AGENT,
    Told,
    agent_slow_until_released,
    configure,
    decisions,
    post_message,
    task_of,
)
from tests.integration.helpers import assert_problem, create_session, eventually, if_match

# The fixtures (pytest finds them by these names).
settings, app, agent, subscriber, events, told = agent_tasks.FIXTURES

CATEGORY = "agent_outputs"
BRANCH = "alt"
NAMED_MEMORY = {
    "memory_type": "planning",
    "category": CATEGORY,
    "key": "plan",
    "content": {"plan": "on the branch"},
    "access_level": "all_agents",
}


class Forked:
    """A session with a user memory on main and a branch ``alt`` forked from it."""

    def __init__(self, client: httpx.AsyncClient, session: dict[str, Any]) -> None:
        self.client = client
        self.sid: str = session["session_id"]
        self.user_id: str = session["user_id"]
        self.path = f"/v1/sessions/{self.sid}/branches/{BRANCH}"

    @classmethod
    async def make(cls, client: httpx.AsyncClient) -> Forked:
        forked = cls(client, await create_session(client))
        response = await client.post(
            f"/v1/sessions/{forked.sid}/branches", json={"name": BRANCH, "purpose": "analysis"}
        )
        assert response.status_code == 201, response.text
        return forked

    async def session(self) -> dict[str, Any]:
        body: dict[str, Any] = (await self.client.get(f"/v1/sessions/{self.sid}")).json()
        return body

    async def branch(self) -> dict[str, Any]:
        response = await self.client.get(self.path)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def main_memory(self, key: str, content: Any) -> None:
        response = await self.client.put(
            "/v1/memories/by-key",
            json={
                "user_id": self.user_id,
                "category": CATEGORY,
                "key": key,
                "memory_type": "planning",
                "content": content,
                "access_level": "all_agents",
            },
        )
        assert response.status_code in (200, 201), response.text

    async def main_values(self) -> dict[str, Any]:
        listed = await self.client.get(
            "/v1/memories", params={"user_id": self.user_id, "category": CATEGORY}
        )
        assert listed.status_code == 200, listed.text
        return {m["key"]: m["content"] for m in listed.json()["items"]}

    async def branch_value(self, key: str) -> Any:
        response = await self.client.get(
            f"{self.path}/memories/by-key", params={"category": CATEGORY, "key": key}
        )
        return response.json()["content"] if response.status_code == 200 else None


def answering(server: AgentServer, *memory_updates: dict[str, Any]) -> None:
    server.reply = {
        "success": True,
        "output_data": {"response": "Here is your plan", "progress_percentage": 40},
        "memory_updates": list(memory_updates),
    }


async def test_a_message_on_a_branch_changes_the_branch_and_not_main(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await configure(client, PLAN_AGENT, url=agent.url)
    answering(agent, NAMED_MEMORY, {"memory_type": "planning", "content": {"unnamed": True}})
    forked = await Forked.make(client)
    await forked.main_memory("plan", {"plan": "on main"})
    await forked.main_memory("budget", {"monthly": 100})

    response = await post_message(client, forked.sid, PLAN, branch=BRANCH)

    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["branch"], result["session_id"], result["session_version"]) == (
        BRANCH,
        forked.sid,
        2,
    )
    assert (result["response"], result["agent"], result["degraded"]) == (
        "Here is your plan",
        PLAN_AGENT,
        False,
    )
    assert result["progress_percentage"] == 40
    # The named update is the branch's; an unnamed one has no place on a branch.
    assert result["memory_updates"]["applied"] == 1
    [rejected] = result["memory_updates"]["rejected"]
    assert (rejected["index"], rejected["status"]) == (1, 422)

    # The agent saw the branch: its content, its name and main's memories through it.
    [sent] = agent.requests
    context = sent["context"]
    assert context["branch"] == BRANCH
    assert {m["key"]: (m["branch"], m["content"]) for m in context["memories"]} == {
        "plan": ("main", {"plan": "on main"}),
        "budget": ("main", {"monthly": 100}),
    }

    branch = await forked.branch()
    assert branch["version"] == 2
    assert branch["session_state"]["agent_outputs"][PLAN_AGENT]["response"] == "Here is your plan"
    assert branch["progress_percentage"] == 40
    assert branch["current_agent"] == PLAN_AGENT
    assert branch["agent_sequence"][-1]["status"] == "completed"

    main = await forked.session()
    assert main["version"] == 1
    assert main["session_state"]["agent_outputs"] == {}
    assert main["progress_percentage"] == 0
    assert main["agent_sequence"] == []
    assert await forked.main_values() == {"plan": {"plan": "on main"}, "budget": {"monthly": 100}}
    assert await forked.branch_value("plan") == {"plan": "on the branch"}

    [decision] = await decisions(client, forked.sid)
    assert (decision["branch"], decision["session_version"]) == (BRANCH, 2)
    assert decision["decision_id"] == result["decision_id"]
    assert (decision["outcome"], decision["task_id"]) == ("agent", result["task_id"])
    versions = (await client.get(f"{forked.path}/versions")).json()["items"]
    assert versions[0]["change_reason"].startswith("message: ")

    # A second message on the branch sees what the first one wrote there.
    second = await post_message(client, forked.sid, PLAN, branch=BRANCH)
    assert second.json()["session_version"] == 3
    context = agent.requests[1]["context"]
    shown = {m["key"]: (m["branch"], m["content"]) for m in context["memories"]}
    assert shown["plan"] == (BRANCH, {"plan": "on the branch"})
    assert context["session_state"]["agent_outputs"][PLAN_AGENT]

    # A message on main is as before: no branch in its context, no memories shown.
    on_main = await post_message(client, forked.sid, PLAN)
    assert on_main.json()["branch"] is None
    assert "branch" not in agent.requests[2]["context"]
    assert "memories" not in agent.requests[2]["context"]


async def test_merging_the_branch_brings_the_turn_to_main(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await configure(client, PLAN_AGENT, url=agent.url)
    answering(agent, NAMED_MEMORY)
    forked = await Forked.make(client)
    assert (await post_message(client, forked.sid, PLAN, branch=BRANCH)).status_code == 200

    merged = await client.post(f"{forked.path}/merge")

    assert merged.status_code == 200, merged.text
    main = merged.json()
    assert main["version"] == 2
    assert main["session_state"]["agent_outputs"][PLAN_AGENT]["response"] == "Here is your plan"
    assert main["progress_percentage"] == 40
    assert main["current_agent"] == PLAN_AGENT
    assert [step["agent_name"] for step in main["agent_sequence"]] == [PLAN_AGENT]
    assert main["session_state"]["conversation_context"]["turn_count"] == 1
    assert (await forked.main_values())["plan"] == {"plan": "on the branch"}

    # A merged branch takes no more messages.
    again = await post_message(client, forked.sid, PLAN, branch=BRANCH)
    body = assert_problem(again, 409)
    assert body["branch_state"] == "merged"
    assert len(agent.requests) == 1


async def test_a_late_answer_lands_on_the_branch_it_came_from(
    client: httpx.AsyncClient, agent: AgentServer, told: Told
) -> None:
    await configure(client, PLAN_AGENT, url=agent.url)
    answering(agent, NAMED_MEMORY)
    release = agent_slow_until_released(agent)
    forked = await Forked.make(client)

    response = await post_message(client, forked.sid, PLAN, "wait=0.5", branch=BRANCH)

    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["degraded"], result["branch"], result["session_version"]) == (
        True,
        BRANCH,
        2,
    )
    task_id = result["task_id"]
    task = await task_of(client, task_id)
    assert (task["status"], task["detached"]) == ("working", True)
    assert task["input"]["turn"]["branch"] == BRANCH
    step = (await forked.branch())["agent_sequence"][-1]
    assert (step["status"], step["task_id"]) == ("executing", task_id)

    release.set()

    async def applied() -> dict[str, Any] | None:
        branch = await forked.branch()
        return branch if branch["version"] == 3 else None

    branch = await eventually(applied)
    step = branch["agent_sequence"][-1]
    assert (step["status"], step["task_id"], step["output_summary"]) == (
        "completed",
        task_id,
        "Here is your plan",
    )
    assert branch["session_state"]["agent_outputs"][PLAN_AGENT]["response"] == "Here is your plan"
    assert await forked.branch_value("plan") == {"plan": "on the branch"}
    main = await forked.session()
    assert (main["version"], main["session_state"]["agent_outputs"]) == (1, {})
    assert await forked.main_values() == {}
    late = (await decisions(client, forked.sid))[0]
    assert (late["outcome"], late["task_id"], late["branch"], late["session_version"]) == (
        "agent",
        task_id,
        BRANCH,
        3,
    )

    [event] = await told(1)
    payload = event["payload"]
    assert (event["event_type"], payload["task_id"], payload["branch"]) == (
        "task.completed",
        task_id,
        BRANCH,
    )
    assert (payload["branch_version"], payload["decision_id"], payload["applied"]) == (
        3,
        late["decision_id"],
        True,
    )
    assert "session_version" not in payload


async def test_a_late_answer_for_a_merged_branch_is_announced_not_applied(
    client: httpx.AsyncClient, agent: AgentServer, told: Told
) -> None:
    await configure(client, PLAN_AGENT, url=agent.url)
    release = agent_slow_until_released(agent)
    forked = await Forked.make(client)
    accepted = await post_message(client, forked.sid, PLAN, "respond-async", branch=BRANCH)
    assert accepted.status_code == 202, accepted.text
    body = accepted.json()
    assert (body["branch"], body["session_version"]) == (BRANCH, 2)
    assert accepted.headers["location"] == body["task_url"]
    assert (await client.post(f"{forked.path}/merge")).status_code == 200

    release.set()

    [event] = await told(1)
    payload = event["payload"]
    assert (event["event_type"], payload["branch"], payload["applied"]) == (
        "task.completed",
        BRANCH,
        False,
    )
    assert (await task_of(client, body["task_id"]))["status"] == "completed"
    assert (await forked.branch())["version"] == 2
    # Main has the merged turn (its step still waiting), and nothing of the late answer.
    main = await forked.session()
    assert main["version"] == 2
    assert PLAN_AGENT not in main["session_state"]["agent_outputs"]


async def test_a_failing_agent_answers_with_its_fallback_on_the_branch(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await configure(client, PLAN_AGENT, url=agent.url, fail_max=50)
    agent.behaviour = "fail"
    forked = await Forked.make(client)

    response = await post_message(client, forked.sid, PLAN, branch=BRANCH)

    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["degraded"], result["branch"], result["session_version"]) == (
        True,
        BRANCH,
        2,
    )
    assert result["fallback"] is not None
    assert result["response"]
    [decision] = await decisions(client, forked.sid)
    assert (decision["outcome"], decision["branch"], decision["fallback"]) == (
        "fallback",
        BRANCH,
        result["fallback"],
    )
    task_id = result["task_id"]

    async def failed() -> dict[str, Any] | None:
        branch = await forked.branch()
        steps = [s for s in branch["agent_sequence"] if s.get("task_id") == task_id]
        return branch if steps and steps[0]["status"] == "failed" else None

    # The task's retries fail too: its end closes the branch's step as failed.
    branch = await eventually(failed)
    assert branch["version"] == 3
    main = await forked.session()
    assert main["agent_sequence"] == []
    assert main["session_state"]["agent_outputs"] == {}


async def test_bad_branch_messages_are_problems(client: httpx.AsyncClient) -> None:
    forked = await Forked.make(client)

    unknown = await post_message(client, forked.sid, PLAN, branch="nope")
    assert "nope" in assert_problem(unknown, 404)["detail"]
    no_session = await post_message(
        client, "00000000-0000-7000-8000-000000000000", PLAN, branch=BRANCH
    )
    assert_problem(no_session, 404)
    empty = await client.post(f"{forked.path}/messages", json={"text": ""})
    assert empty.status_code in (400, 422)
    assert empty.headers["content-type"].startswith("application/problem+json")
    extra = await client.post(f"{forked.path}/messages", json={"text": PLAN, "branch": "x"})
    assert extra.status_code in (400, 422)
    too_long = await post_message(client, forked.sid, PLAN, "wait=1" + " " * 1100, branch=BRANCH)
    assert_problem(too_long, 400)

    completed = await client.post(
        f"/v1/sessions/{forked.sid}/complete", json={}, headers=if_match(1)
    )
    assert completed.status_code == 200, completed.text
    closed = await post_message(client, forked.sid, PLAN, branch=BRANCH)
    assert_problem(closed, 409)
    # Nothing was written by the refused messages.
    assert (await forked.branch())["version"] == 1
    assert await decisions(client, forked.sid) == []


async def test_fallbacks_on_a_branch_count_for_the_session_and_escalate_it(
    client: httpx.AsyncClient,
) -> None:
    """The safety limits are the session's: a run of fallbacks on a branch escalates the
    session, and then neither the branch nor main takes messages until a person resolves
    it."""
    forked = await Forked.make(client)
    question = "what is compound interest"  # its agent has no url: the fallback answers
    statuses = []
    for _ in range(10):
        result = (await post_message(client, forked.sid, question, branch=BRANCH)).json()
        assert (result["branch"], result["degraded"]) == (BRANCH, True)
        statuses.append(result["session_status"])
        if result["session_status"] == "escalated":
            break
    assert statuses[-1] == "escalated", statuses
    assert result["next_step"]["outcome"] == "request_manual_intervention"
    assert (await forked.session())["status"] == "escalated"

    on_branch = assert_problem(await post_message(client, forked.sid, PLAN, branch=BRANCH), 409)
    assert on_branch["session_status"] == "escalated"
    assert_problem(await post_message(client, forked.sid, PLAN), 409)
    branch_turns = [d for d in await decisions(client, forked.sid) if d["branch"] == BRANCH]
    assert len(branch_turns) == len(statuses)
