"""An outbox event as a Server-Sent Events message: ``id`` its position, ``event`` its
type, ``data`` one line of JSON. Encoded once per event, whatever the number of streams."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson

from app.events.schemas import StreamEvent

# A comment line: keeps proxies and clients from taking a quiet stream for a dead one.
KEEP_ALIVE = b": keep-alive\n\n"


def retry_frame(milliseconds: int) -> bytes:
    """The reconnection delay an EventSource should use, sent first on every stream."""
    return f"retry: {milliseconds}\n\n".encode()


def stream_event(row: Mapping[str, Any]) -> StreamEvent:
    """A numbered outbox row (position, event_id, event_type, payload, created_at,
    trace_id) as the event the streams send."""
    position: int = row["position"]
    event_type: str = row["event_type"]
    payload: dict[str, Any] = row["payload"]
    created_at: datetime = row["created_at"]
    data = orjson.dumps(
        {
            "position": position,
            "event_id": str(row["event_id"]),
            "event_type": event_type,
            "created_at": created_at,
            "trace_id": row["trace_id"],
            "payload": payload,
        }
    )
    # orjson escapes line breaks inside strings: the JSON is one line, one data field.
    frame = b"id: %d\nevent: %s\ndata: %s\n\n" % (position, event_type.encode(), data)
    session_id = payload.get("session_id") if isinstance(payload, dict) else None
    return StreamEvent(
        position=position,
        event_type=event_type,
        session_id=session_id if isinstance(session_id, str) else None,
        frame=frame,
    )
