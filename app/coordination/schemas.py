"""Coordination shapes: the message API, the seed's AgentCommunicationProtocol, decisions."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Annotated, Literal
from uuid import UUID

import msgspec
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from app.common.jsontypes import JsonObject, JsonValue
from app.common.validation import MAX_JSON_DEPTH, reject_deep_json
from app.coordination.answers import RepairKind
from app.coordination.breaker import BreakerState
from app.coordination.intents import SERVER_MODIFIERS, IntentRules
from app.memories.schemas import BranchMemory


def _not_server_only(flag: str) -> str:
    if flag in SERVER_MODIFIERS:
        raise ValueError(f"{flag} is set by the server (from the agents' breakers), not by callers")
    return flag


ContextFlag = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$"),
    AfterValidator(_not_server_only),
]
Phrase = Annotated[str, StringConstraints(min_length=1, max_length=100)]
MessageText = Annotated[str, StringConstraints(min_length=1, max_length=10_000)]
Identifier = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,49}$")]


class AnalyzeRequest(BaseModel):
    """Analyse a message without changing anything."""

    model_config = ConfigDict(extra="forbid")

    message: MessageText
    session_id: UUID | None = None
    context_flags: list[ContextFlag] = Field(default_factory=list, max_length=20)


class MessageRequest(BaseModel):
    """A user's message to a session."""

    model_config = ConfigDict(extra="forbid")

    text: MessageText
    context_flags: list[ContextFlag] = Field(default_factory=list, max_length=20)


class IntentTypeWrite(BaseModel):
    """Create or change an intent type and its keyword rules (admin)."""

    model_config = ConfigDict(extra="forbid")

    base_weight: int = Field(ge=0, le=100)
    description: Annotated[str, StringConstraints(max_length=500)] = ""
    keywords: list[Phrase] = Field(default_factory=list, max_length=500)


class ModifierWrite(BaseModel):
    """Change a context modifier's points and text cues (admin)."""

    model_config = ConfigDict(extra="forbid")

    # Negative points lower the score (agent_unavailable); a score stays within 0..100.
    points: int = Field(ge=-100, le=100)
    description: Annotated[str, StringConstraints(max_length=500)] = ""
    cues: list[Phrase] = Field(default_factory=list, max_length=500)


class BreakerCommand(BaseModel):
    """Manual isolation of an agent (admin)."""

    model_config = ConfigDict(extra="forbid")

    state: Literal["open", "closed"]


# -- the seed's AgentCommunicationProtocol ----------------------------------------------


@dataclass(frozen=True, slots=True)
class AgentInput:
    """An agent's ``input_data``: the message, the intent it is to handle and its clause,
    and the other intents found in the message."""

    message: str
    intent: str
    clause: str
    secondary_intents: list[str]


@dataclass(frozen=True, slots=True)
class AgentContext:
    """An agent's ``context``: the session as the API shows it, and the context flags."""

    session_type: str
    # As stored and shown: the seed's fields and whatever agents added to it.
    session_state: JsonObject
    current_agent: str | None
    progress_percentage: int
    context_flags: list[str]


@dataclass(frozen=True, slots=True)
class BranchAgentContext(AgentContext):
    """An agent's ``context`` for a message on a branch: the branch's content (as above),
    the branch's name, and the memories the agent may read as the branch sees them (its
    own values over main's), newest first."""

    branch: str
    memories: list[BranchMemory]


@dataclass(frozen=True, slots=True)
class ClassifierInput:
    """The AI classifier's ``input_data``: the message and the intents it may name."""

    message: str
    intents: list[str]


@dataclass(frozen=True, slots=True)
class ClassifierContext:
    """The AI classifier's ``context``."""

    context_flags: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentRequest:
    """What an agent (or the AI classifier) is sent: the seed's request format, whose
    ``input_data`` and ``context`` objects are Switchboard's to fill (as above)."""

    agent_name: str
    request_id: str
    user_id: str | None
    session_id: str | None
    input_data: AgentInput | ClassifierInput
    context: AgentContext | BranchAgentContext | ClassifierContext
    priority: int
    timeout_ms: int


class MemoryUpdate(BaseModel):
    """A memory an agent asks Switchboard to store (same rules as POST /v1/memories)."""

    model_config = ConfigDict(extra="forbid")

    memory_type: Identifier
    content: JsonValue
    category: Identifier | None = None
    key: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    access_level: Identifier | None = None
    # Session-level unless the agent says the fact belongs to the user.
    scope: Literal["session", "user"] = "session"


class ErrorDetails(BaseModel):
    """Why an agent could not do the job."""

    model_config = ConfigDict(extra="allow")

    code: str | None = None
    message: str | None = None
    retryable: bool = False


class AgentResponse(BaseModel):
    """What an agent answers (the seed's response_format)."""

    model_config = ConfigDict(extra="allow")

    agent_name: str | None = None
    request_id: str | None = None
    success: bool
    # Kept in session_state.agent_outputs.<agent>, two levels below the state's top: an
    # answer nested deeper than a stored session may be is not an answer (data corruption).
    output_data: Annotated[
        JsonValue, AfterValidator(partial(reject_deep_json, max_depth=MAX_JSON_DEPTH - 2))
    ] = None
    memory_updates: list[MemoryUpdate] = Field(default_factory=list, max_length=100)
    next_agent_suggestions: list[str] = Field(default_factory=list, max_length=20)
    error_details: ErrorDetails | None = None
    execution_time_ms: int | None = Field(default=None, ge=0)


# -- results ------------------------------------------------------------------------------


class DecidedIntent(msgspec.Struct, frozen=True):
    """One detected intent as a decision records it: what was found, where, its score."""

    intent: str
    clause: str
    position: int
    matched: list[str]
    base_weight: int
    modifiers: list[str]
    score: int


class IntentView(DecidedIntent, frozen=True):
    """One detected intent as the API shows it, with the agent that serves it."""

    agent: str | None


@dataclass(frozen=True, slots=True)
class ClarificationView:
    """The question asked instead of guessing between close, conflicting intents."""

    question: str
    options: list[str]


@dataclass(frozen=True, slots=True)
class Analysis:
    """Detected intents, the modifiers applied and the routing decision."""

    classifier: str
    context_flags: list[str]
    intents: list[IntentView]
    primary: IntentView | None
    secondaries: list[IntentView]
    clarification: ClarificationView | None
    agent: str | None
    routed_by: str | None
    breaker_state: str | None


@dataclass(frozen=True, slots=True)
class RejectedMemoryUpdate:
    """A memory update that was not stored: its place in the agent's list, and why."""

    index: int
    status: int
    detail: str


@dataclass(frozen=True, slots=True)
class MemoryUpdateOutcome:
    """What happened to the memory updates an agent returned."""

    applied: int = 0
    rejected: list[RejectedMemoryUpdate] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MessageResult:
    """The coordinator's answer to one message."""

    decision_id: UUID
    session_id: UUID
    session_version: int
    response: str
    agent: str | None
    degraded: bool
    fallback: str | None
    # The agent the failed agent's direct_agent_routing passed the message to (its answer,
    # or its own fallback's, follows the routing note in ``response``).
    routed_to: str | None
    intents: list[IntentView]
    clarification: ClarificationView | None
    # The session's pending actions as stored and shown (clients may add members).
    pending_actions: list[JsonObject]
    progress_percentage: int
    output_data: JsonValue
    next_agent_suggestions: list[str]
    memory_updates: MemoryUpdateOutcome
    execution_time_ms: int
    # The answer's JSON was broken and repaired (the decision says how).
    repaired: bool = False
    # The agent's task (GET /v1/tasks/{id}): the one that answered, or, when the caller
    # stopped waiting for it (degraded), the one still working, whose answer is applied to
    # the session when it comes (event task.completed). None: no agent was called.
    task_id: UUID | None = None
    task_url: str | None = None
    # What the session does next (the decision's next_step): request_manual_intervention
    # means the session is now escalated and takes no messages until a person resolves it.
    next_step: NextStepRecord | None = None
    session_status: str = "active"
    # The branch the turn was written to (POST .../branches/{branch}/messages): then
    # ``session_version`` is the branch's version. None: the session itself.
    branch: str | None = None


@dataclass(frozen=True, slots=True)
class MessageAccepted:
    """The 202 answer to a message sent with ``Prefer: respond-async``: the agent's task
    (read it at ``task_url``; its answer is applied to the session when it comes, and
    announced as the event task.completed) and the turn recorded meanwhile."""

    task_id: UUID
    task_url: str
    task_status: str
    decision_id: UUID
    session_id: UUID
    session_version: int
    agent: str | None
    intents: list[IntentView]
    pending_actions: list[JsonObject]
    next_step: NextStepRecord | None = None
    # As in MessageResult: the branch the turn was written to, or None.
    branch: str | None = None


class ResolveRequest(BaseModel):
    """A person's resolution of an escalated session: what they did about it."""

    model_config = ConfigDict(extra="forbid")

    note: Annotated[
        str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2000)
    ] = Field(description="What was done about the escalation (recorded in the decision log).")


@dataclass(frozen=True, slots=True)
class Resolution:
    """The answer to POST /v1/sessions/{id}/resolve."""

    session_id: UUID
    session_version: int
    status: str
    decision_id: UUID
    # The escalation this resolution ends: its decision and why it was made.
    escalation_decision_id: UUID | None
    escalation_reason: str | None
    note: str
    resolved_by: str


class RoutedTo(msgspec.Struct, frozen=True):
    """Where a direct_agent_routing fallback passed the message, and how that call went."""

    agent: str
    intent: str
    outcome: str
    fallback: str | None
    attempts: int
    error: str | None
    breaker_state: str


class DecisionResponse(msgspec.Struct, frozen=True):
    """What the user was answered."""

    text: str
    output_data: JsonValue
    next_agent_suggestions: list[str]
    # Decisions recorded before direct routing passed messages on have none.
    routed_to: RoutedTo | None = None
    # The answering agent's JSON was broken and repaired (app/coordination/answers.py):
    # cut off ("truncated") or broken before its end ("malformed").
    repaired: bool = False
    repaired_from: RepairKind | None = None


class NextStepRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A next-step decision as the log stores and shows it (app/coordination/next_step.py):
    the outcome, the rule that gave it and why, and the inputs it read (the event, the
    counters, the limits and the event's facts; a dead letter's and a resolution's are
    written by SQL and name their own)."""

    outcome: str
    rule: str
    reason: str
    inputs: JsonObject


class DecisionRecord(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What the coordinator decided for one message and what came of it: built once per
    turn, stored by the statement that writes the session change it caused.

    ``decision_id``, ``session_version`` and ``created_at`` are the database's to fill in
    when it stores the record (None until then); they are declared here so that a stored
    ``Decision`` lists its fields in the table's order."""

    decision_id: UUID | None = None
    session_id: UUID
    session_version: int | None = None
    message: str
    context_flags: list[str]
    classifier: str
    intents: list[DecidedIntent]
    primary_intent: str | None
    chosen_agent: str | None
    routed_by: str | None
    breaker_state: str | None
    outcome: str
    fallback: str | None
    degraded: bool
    attempts: int
    error: str | None
    response: DecisionResponse
    execution_time_ms: int
    created_by: str
    created_at: datetime | None = None
    # The trace of the request (or task) that made the decision: X-Trace-Id, log lines.
    trace_id: str | None = None
    # The agent task behind the answer: waited for, stopped waiting for (the fallback
    # answered), accepted (respond-async), or whose late answer this decision records.
    task_id: UUID | None = None
    # What the session does next, decided after this (NULL on decisions from before it).
    next_step: NextStepRecord | None = None
    # The branch the turn was written to (its session_version is the branch's version);
    # None: the session itself. Set by the statement that stores the decision.
    branch: str | None = None


class Decision(DecisionRecord, frozen=True, kw_only=True, omit_defaults=False):
    """One stored coordination decision (a row of ``coordination_decisions``)."""

    decision_id: UUID
    session_version: int | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class DecisionPage:
    """One page of a session's decisions, newest first."""

    items: list[Decision]
    next_cursor: str | None


class RuleData(msgspec.Struct, frozen=True):
    """The intent rules as stored: weights, keywords, modifier points and cues."""

    weights: dict[str, int]
    keywords: dict[str, list[str]]
    modifiers: dict[str, int]
    cues: dict[str, list[str]]

    def rules(self, intent_agents: dict[str, str]) -> IntentRules:
        """The rules the intent engine runs on, with the agents serving each intent."""
        return IntentRules(
            base_weights=self.weights,
            keywords=self.keywords,
            modifiers=self.modifiers,
            cues=self.cues,
            intent_agents=intent_agents,
        )


class PublishedBreaker(msgspec.Struct, frozen=True):
    """A breaker state as one replica published it (a row of ``agent_breakers``, or the
    NOTIFY that announced it)."""

    agent_name: str
    state: BreakerState
    failure_count: int
    version: int
    opened_at: datetime | None = None
    updated_by: str | None = None


@dataclass(frozen=True, slots=True)
class IntentType:
    """An intent type, its weight and its keyword rules."""

    name: str
    base_weight: int
    description: str
    keywords: list[str]
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class IntentModifier:
    """A context modifier, its points and its text cues."""

    name: str
    points: int
    description: str
    cues: list[str]


@dataclass(frozen=True, slots=True)
class BreakerView:
    """An agent's circuit breaker as this replica sees it."""

    agent: str
    state: str
    failure_count: int
    opened_at: datetime | None
    fail_max: int
    reset_timeout_ms: int
