"""One logging set-up for every entry point (``switchboard serve|scheduler|migrate|agents``,
``python -m scheduler``, uvicorn's own loggers): one line per record on stderr, JSON
when stderr is not a terminal, a compact text line when it is, each with the trace id
of the request or job it was written for.

Quiet at INFO in steady state: the libraries' routine chatter (APScheduler's "Running
job" every 5 s, alembic's "Context impl", uvicorn's start-up lines) shows only at DEBUG;
their warnings and errors always show.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import IO, Any

import orjson

from app.settings import LoggingSettings
from app.tracing import current_trace_id

# Loggers whose INFO lines are routine (a job ran, a plugin loaded, a server started):
# they log from WARNING up unless the level is DEBUG.
CHATTY = ("apscheduler", "alembic", "uvicorn", "pgserver", "litestar", "httpx", "httpcore")

# What every LogRecord has; anything else on a record came from ``extra=`` and is
# written out as a field of its own.
_STANDARD = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys() | {"message", "asctime"}
)


class TraceFilter(logging.Filter):
    """Stamp each record with the trace id current where it was logged (a handler's filter
    runs in the logging thread and context, before any formatting)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Add ``trace_id`` unless the record already carries one."""
        if getattr(record, "trace_id", None) is None:
            trace_id = current_trace_id()
            if trace_id is not None:
                record.trace_id = trace_id
        return True


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {key: value for key, value in vars(record).items() if key not in _STANDARD}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (RFC 3339, UTC), level, logger, message, then the
    record's structured fields (trace_id, method, status, job, ...) and any exception."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _extras(record).items():
            line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        try:
            return orjson.dumps(line, default=str).decode()
        except TypeError:  # what orjson cannot write even as str (an int past 64 bits)
            return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """``12:00:01.234 INFO  switchboard.access  GET /health 200 0.4 ms  trace_id=…``: local
    time, for a person at a terminal; the structured fields follow as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one (or, with a traceback, several) lines of text."""
        clock = time.strftime("%H:%M:%S", time.localtime(record.created))
        text = (
            f"{clock}.{int(record.msecs):03d} {record.levelname:<5} {record.name}  "
            f"{record.getMessage()}"
        )
        # The access line already says method, path, status and duration in its message.
        fields = {
            key: value
            for key, value in _extras(record).items()
            if record.name != "switchboard.access" or key in ("trace_id", "worker")
        }
        if fields:
            text += "  " + " ".join(f"{key}={value}" for key, value in fields.items())
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            text += "\n" + self.formatStack(record.stack_info)
        return text


def wants_json(settings: LoggingSettings, stream: IO[str]) -> bool:
    """JSON unless asked for text, or (``auto``) unless ``stream`` is a terminal."""
    if settings.format == "auto":
        isatty = getattr(stream, "isatty", None)
        return not (isatty is not None and isatty())
    return settings.format == "json"


def log_handler(settings: LoggingSettings, stream: IO[str]) -> logging.Handler:
    """The one handler: ``stream``, the configured format, each record's trace id."""
    handler = logging.StreamHandler(stream)
    handler.addFilter(TraceFilter())
    handler.setFormatter(JsonFormatter() if wants_json(settings, stream) else TextFormatter())
    return handler


def configure_logging(
    settings: LoggingSettings, stream: IO[str] | None = None, *, chore: bool = False
) -> None:
    """Send every logger's records to one handler on ``stream`` (stderr by default), in
    the configured format and level; replaces any handler set up before (basicConfig,
    uvicorn's or Litestar's own). A ``chore`` (a CLI command whose answer is its output)
    logs only what went wrong, unless the level is DEBUG."""
    handler = log_handler(settings, stream if stream is not None else sys.stderr)
    root = logging.getLogger()
    for old in root.handlers[:]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    level = logging.getLevelNamesMapping()[settings.level]
    if chore and level > logging.DEBUG:
        level = max(level, logging.WARNING)
    root.setLevel(level)
    # uvicorn (run as `uvicorn ...`) and Litestar may have given their loggers handlers
    # of their own that do not propagate: send everything through the one handler.
    for name in list(logging.root.manager.loggerDict):
        if name.split(".", 1)[0] in ("uvicorn", "litestar"):
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.propagate = True
            logger.setLevel(logging.NOTSET)
    chatty_level = logging.DEBUG if settings.level == "DEBUG" else logging.WARNING
    for name in CHATTY:
        logging.getLogger(name).setLevel(chatty_level)
    # A library's warning (warnings.warn) becomes a line in the same format, not two raw
    # lines of Python's own on stderr.
    logging.captureWarnings(True)


class WorkerFilter(logging.Filter):
    """Stamp each record with the number of the worker process that wrote it."""

    def __init__(self, worker: int) -> None:
        super().__init__()
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        """Add ``worker`` (a supervisor's line about a worker names it already)."""
        if getattr(record, "worker", None) is None:
            record.worker = self.worker
        return True


def mark_worker(worker: int) -> None:
    """From now on, every line this process logs says ``worker=<n>`` (``switchboard serve
    --workers``: which of the processes behind the port wrote it)."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(WorkerFilter(worker))
