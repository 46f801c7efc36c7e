"""MemoryHook.write builds its MemoryWrite without validating it again: that is safe only
while every field it fills was validated by MemoryHook with the same type and constraints
(a write, from the webhook or the REST API, passes the same validation)."""

from __future__ import annotations

from typing import Annotated, Any, get_args

import pytest
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from app.memories.schemas import MemoryWrite
from app.webhooks.schemas import WRITE_FIELDS, MemoryHook


def _validated_as(field: FieldInfo) -> Any:
    """The type a field validates, constraints included, with ``| None`` dropped (MemoryHook
    makes the fields a write requires optional, and checks them per action)."""
    annotation: Any = field.annotation
    if field.metadata:
        annotation = Annotated[(annotation, *field.metadata)]  # type: ignore[valid-type]
    args = get_args(annotation)
    if type(None) in args:
        rest = tuple(a for a in args if a is not type(None))
        annotation = rest[0] if len(rest) == 1 else rest
    return annotation


def test_every_field_a_write_fills_is_validated_by_the_hook_as_memory_write_would() -> None:
    assert set(WRITE_FIELDS) == set(MemoryWrite.model_fields)
    for field, hook_field in WRITE_FIELDS.items():
        write = _validated_as(MemoryWrite.model_fields[field])
        assert _validated_as(MemoryHook.model_fields[hook_field]) == write, field


def test_content_too_deep_for_a_memory_is_refused_by_the_hook_itself() -> None:
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    body = {
        "agent_name": "Notes_Agent",
        "user_id": "01900000-0000-7000-8000-000000000000",
        "memory_type": "orchestrator",
    }
    with pytest.raises(ValidationError):
        MemoryWrite.model_validate({**body, "content": deep})
    with pytest.raises(ValidationError):
        MemoryHook.model_validate({**body, "memory_content": deep})
    written = MemoryHook.model_validate({**body, "memory_content": {"a": [1]}}).write()
    del body["agent_name"]
    assert written == MemoryWrite.model_validate({**body, "content": {"a": [1]}})
