"""A2A answers (a2a-sdk Task and Message protobufs) in Switchboard's words, and the
message an A2A agent is sent."""

from __future__ import annotations

import pytest
from a2a.types.a2a_pb2 import (
    AgentCard,
    AgentInterface,
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)

from app.agents.cards import published_interface
from app.coordination.a2a_answers import (
    A2AAnswerFailed,
    A2AContinuation,
    a2a_message,
    outcome_of,
    state_name,
)
from app.outbound.a2a import jsonrpc_interface


def _task(state: int, said: str = "", artifacts: tuple[str, ...] = ()) -> Task:
    status = TaskStatus(state=state)  # type: ignore[arg-type]
    if said:
        status.message.CopyFrom(Message(role=Role.ROLE_AGENT, parts=[Part(text=said)]))
    return Task(
        id="t-1",
        context_id="c-1",
        status=status,
        artifacts=[
            Artifact(artifact_id=f"a{i}", parts=[Part(text=t)]) for i, t in enumerate(artifacts)
        ],
    )


def test_state_names_follow_switchboards_task_statuses() -> None:
    assert state_name(TaskState.TASK_STATE_INPUT_REQUIRED) == "input-required"
    assert state_name(TaskState.TASK_STATE_AUTH_REQUIRED) == "auth-required"
    assert state_name(TaskState.TASK_STATE_COMPLETED) == "completed"
    assert state_name(TaskState.TASK_STATE_UNSPECIFIED) == "unspecified"


def test_a_completed_task_reads_its_status_message_else_its_artifacts() -> None:
    said = outcome_of(_task(TaskState.TASK_STATE_COMPLETED, "Done!", ("the plan",)), "r1")
    assert said.response.success
    assert said.response.request_id == "r1"
    output = said.response.output_data
    assert isinstance(output, dict)
    assert output["response"] == "Done!"
    assert output["artifacts"][0]["parts"] == [{"text": "the plan"}]
    assert output["a2a"] == {"task_id": "t-1", "context_id": "c-1", "state": "completed"}
    assert said.continuation is None
    assert not said.interrupted
    silent = outcome_of(_task(TaskState.TASK_STATE_COMPLETED, "", ("one", "two")), None)
    assert isinstance(silent.response.output_data, dict)
    assert silent.response.output_data["response"] == "one\ntwo"


def test_input_required_is_the_agents_question_and_what_to_continue() -> None:
    asked = outcome_of(_task(TaskState.TASK_STATE_INPUT_REQUIRED, "Which month?"), "r1")
    assert asked.interrupted
    assert asked.continuation == A2AContinuation(task_id="t-1", context_id="c-1")
    assert isinstance(asked.response.output_data, dict)
    assert asked.response.output_data["response"] == "Which month?"
    mute = outcome_of(_task(TaskState.TASK_STATE_AUTH_REQUIRED), None)
    assert mute.state == "auth-required"
    assert mute.continuation is not None


@pytest.mark.parametrize(
    "state",
    [
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_REJECTED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_SUBMITTED,
    ],
)
def test_a_task_that_did_not_end_well_is_a_failed_call(state: int) -> None:
    with pytest.raises(A2AAnswerFailed) as failed:
        outcome_of(_task(state, "broke"), None)
    assert not failed.value.retryable


def test_a_message_answer() -> None:
    reply = Message(
        message_id="m", role=Role.ROLE_AGENT, parts=[Part(text="Hi"), Part(text="there")]
    )
    said = outcome_of(reply, None)
    assert said.state == "completed"
    assert isinstance(said.response.output_data, dict)
    assert said.response.output_data["response"] == "Hi\nthere"


def test_an_answer_holding_what_cannot_be_stored_is_refused() -> None:
    with pytest.raises(A2AAnswerFailed):
        outcome_of(_task(TaskState.TASK_STATE_COMPLETED, "nul \x00 here"), None)


def test_the_message_sent_carries_the_request_and_the_continuation() -> None:
    request = {"request_id": "r1", "input_data": {"message": "January"}, "session_id": "s"}
    sent = a2a_message(request, A2AContinuation(task_id="t-1", context_id="c-1"))
    assert sent.role == Role.ROLE_USER
    assert [p.text for p in sent.parts] == ["January"]
    assert (sent.task_id, sent.context_id) == ("t-1", "c-1")
    assert sent.metadata["switchboard"]["request_id"] == "r1"
    fresh = a2a_message({"input_data": {"intents": ["a"]}}, None)
    assert fresh.task_id == ""
    assert fresh.parts[0].text == '{"intents":["a"]}'


def test_the_jsonrpc_interface_prefers_1_0() -> None:
    card = AgentCard(
        supported_interfaces=[
            AgentInterface(
                url="http://a/rest", protocol_binding="HTTP+JSON", protocol_version="1.0"
            ),
            AgentInterface(url="http://a/old", protocol_binding="JSONRPC", protocol_version="0.3"),
            AgentInterface(url="http://a/rpc", protocol_binding="JSONRPC", protocol_version="1.0"),
        ]
    )
    found = jsonrpc_interface(card)
    assert found is not None
    assert found.url == "http://a/rpc"
    assert jsonrpc_interface(AgentCard()) is None


def test_a_published_card_is_a2a_only_with_supported_interfaces() -> None:
    seed_card = {"name": "x", "url": "http://a/agent", "skills": []}
    assert published_interface(seed_card) is None
    a2a_card = {
        "name": "x",
        "supportedInterfaces": [
            {"url": "http://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
    }
    found = published_interface(a2a_card)
    assert found is not None
    assert found.url == "http://a/rpc"
    assert "supportedInterfaces" in a2a_card  # not changed by parsing
    with pytest.raises(ValueError, match=r"\w"):
        published_interface({"supportedInterfaces": "nope"})
