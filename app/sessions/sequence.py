"""A session's agent sequence as a write carries it: the steps it touches typed, the others
as stored.

A message closes at most the newest running step and appends one or two; a PATCH touches
none. Typing all (up to 100) stored steps with pydantic and dumping them back on every such
write was 15 % of a message's CPU (docs/benchmarks.md, "The agent sequence carried as
stored"). So a write types only the steps it reads whole or changes, and stores the others
as they were read: byte for byte the JSON the column held. What a write does read of every
step (its status, task and number, to find the running step, the tasks that ended and the
next number) is checked on each stored step when the sequence is read; a sequence whose
shape is wrong is then validated whole, so the 422 names the step and field as before.

Stored steps were validated when they were written (the sequence is not patchable: only
the service appends to it). A step stored before a rule tightened is carried as it is while
no write touches it, rather than refusing every write to the session: a write that touches
it types it and is refused with a 422 naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, overload

from pydantic import TypeAdapter, ValidationError

from app.common.validation import field_errors
from app.errors import ValidationFailed
from app.sessions.schemas import AgentExecution, ExecutionStatus

# A step as stored (decoded JSON, not typed) or as a write made or changed it (typed).
Step = dict[str, Any] | AgentExecution

_SEQUENCE = TypeAdapter(list[AgentExecution])
_STATUSES: frozenset[object] = frozenset({"pending", "executing", "completed", "failed"})
_RUNNING: frozenset[object] = frozenset({"executing", "pending"})


def sequence_of(raw: list[dict[str, Any]]) -> list[AgentExecution]:
    """A stored agent sequence, every step typed (422 naming the step if one is not valid)."""
    try:
        return _SEQUENCE.validate_python(raw)
    except ValidationError as exc:
        raise ValidationFailed(
            "The stored agent_sequence is not valid.",
            errors=field_errors(exc, prefix="agent_sequence"),
        ) from None


def _shaped(item: object) -> bool:
    """Whether a stored step holds what a write reads of every step, as the model types it."""
    if not isinstance(item, dict):
        return False
    order = item.get("execution_order")
    task = item.get("task_id")
    return (
        item.get("status") in _STATUSES
        and type(order) is int
        and order >= 1
        and (task is None or type(task) is str)
    )


class AgentSequence:
    """An immutable agent sequence: stored steps kept as read, touched steps typed.

    Indexing and iterating give typed steps (a stored step is typed when it is read that
    way, 422 naming it if it is not valid); :meth:`storage` gives the column's JSON, the
    untouched steps exactly as they were read.
    """

    __slots__ = ("_items", "_shape_checked")

    def __init__(self, items: tuple[Step, ...], *, shape_checked: bool = True) -> None:
        self._items = items
        self._shape_checked = shape_checked

    @classmethod
    def of(cls, steps: Iterable[AgentExecution]) -> AgentSequence:
        """A sequence of typed steps."""
        return cls(tuple(steps))

    @classmethod
    def stored(cls, raw: list[dict[str, Any]]) -> AgentSequence:
        """The sequence a row holds, its shape checked now (422 naming the step if wrong)."""
        sequence = cls.carried(raw)
        sequence._check_shape()
        return sequence

    @classmethod
    def carried(cls, raw: list[dict[str, Any]]) -> AgentSequence:
        """The sequence a row holds, for a write that carries it unchanged (a PATCH): nothing
        is checked unless a step is read."""
        return cls(tuple(raw), shape_checked=False)

    def _check_shape(self) -> None:
        if self._shape_checked:
            return
        if not all(isinstance(item, AgentExecution) or _shaped(item) for item in self._items):
            # A step whose shape is wrong is typed: the 422 names it and its field. If the
            # model takes what the check did not (a number as "3"), it is carried typed.
            self._items = tuple(
                item if isinstance(item, AgentExecution) or _shaped(item) else self._typed(i)
                for i, item in enumerate(self._items)
            )
        self._shape_checked = True

    # -- reads: typed steps ------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> AgentExecution: ...
    @overload
    def __getitem__(self, index: slice) -> AgentSequence: ...
    def __getitem__(self, index: int | slice) -> AgentExecution | AgentSequence:
        if isinstance(index, slice):
            return AgentSequence(self._items[index], shape_checked=self._shape_checked)
        position = range(len(self._items))[index]  # IndexError as a list's
        return self._typed(position)

    def __iter__(self) -> Iterator[AgentExecution]:
        return (self._typed(position) for position in range(len(self._items)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AgentSequence):
            return self.storage() == other.storage()
        if isinstance(other, list):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"AgentSequence({list(self._items)!r})"

    def _typed(self, position: int) -> AgentExecution:
        item = self._items[position]
        if isinstance(item, AgentExecution):
            return item
        try:
            return AgentExecution.model_validate(item)
        except ValidationError as exc:
            raise ValidationFailed(
                "The stored agent_sequence is not valid.",
                errors=field_errors(exc, prefix=f"agent_sequence.{position}"),
            ) from None

    # -- reads: the fields every step is checked for -----------------------------------

    def next_order(self) -> int:
        """The number of a step appended now: one past the highest (not the length: orders
        need not be dense or sorted once the sequence was trimmed)."""
        self._check_shape()
        return max((_field(item, "execution_order") for item in self._items), default=0) + 1

    def newest_running(self) -> int | None:
        """The index of the newest step still running that no agent task owns (a task's
        step is closed by its task), or None."""
        self._check_shape()
        for position in range(len(self._items) - 1, -1, -1):
            item = self._items[position]
            if _field(item, "status") in _RUNNING and _field(item, "task_id") is None:
                return position
        return None

    def ended_tasks(self) -> dict[str, ExecutionStatus]:
        """The agent tasks whose steps are no longer executing, and how they ended."""
        self._check_shape()
        ended: dict[str, ExecutionStatus] = {}
        for item in self._items:
            task = _field(item, "task_id")
            status = _field(item, "status")
            if task is not None and status != "executing":
                ended[task] = status
        return ended

    def index_of_task(self, task_id: str) -> int | None:
        """The index of the first step of agent task ``task_id``, or None."""
        self._check_shape()
        return next(
            (i for i, item in enumerate(self._items) if _field(item, "task_id") == task_id), None
        )

    # -- changes: new sequences, this one untouched --------------------------------------

    def replaced(self, position: int, step: AgentExecution) -> AgentSequence:
        """This sequence with the step at ``position`` replaced by ``step``."""
        items = list(self._items)
        items[position] = step
        return AgentSequence(tuple(items), shape_checked=self._shape_checked)

    def appended(self, step: AgentExecution) -> AgentSequence:
        """This sequence with ``step`` after its last step."""
        return AgentSequence((*self._items, step), shape_checked=self._shape_checked)

    def last(self, limit: int) -> AgentSequence:
        """Only the last ``limit`` steps (all of them if there are no more)."""
        if len(self._items) <= limit:
            return self
        return AgentSequence(self._items[-limit:], shape_checked=self._shape_checked)

    # -- the storage form --------------------------------------------------------------

    def storage(self) -> list[Any]:
        """The column's JSON: untouched steps as they were read, typed ones dumped."""
        return [
            item if isinstance(item, dict) else item.model_dump(mode="json") for item in self._items
        ]


def _field(item: Step, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name)


EMPTY = AgentSequence(())
