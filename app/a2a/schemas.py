"""What Switchboard reads of an A2A message beyond its text: the metadata that names the
user (for a message without a contextId) and the coordinator's options."""

from __future__ import annotations

from uuid import UUID

from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct
from pydantic import BaseModel, ConfigDict, Field

from app.coordination.schemas import ContextFlag
from app.sessions.schemas import SessionType
from app.webhooks.schemas import Channel, UserRef


class MessageMetadata(BaseModel):
    """``message.metadata``: the n8n webhook's fields, under the same names. Other keys are
    the client's own and are ignored."""

    model_config = ConfigDict(extra="ignore")

    # Who wrote (without a contextId): Switchboard's user id, or the client's own id for
    # them (the user is created on first use).
    user_id: UUID | None = None
    user_ref: UserRef | None = None
    # The kind of session continued or started (without a contextId).
    session_type: SessionType = "multi_agent_chat"
    channel: Channel | None = None
    context_flags: list[ContextFlag] = Field(default_factory=list, max_length=20)

    @classmethod
    def from_struct(cls, metadata: Struct) -> MessageMetadata:
        """Validated metadata (pydantic's ValidationError when it is not valid)."""
        return cls.model_validate(MessageToDict(metadata))
