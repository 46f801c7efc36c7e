"""The one logging set-up: JSON lines off a terminal, text on one, quiet libraries at INFO,
quiet chores, and the trace id on every line written inside a trace."""

from __future__ import annotations

import io
import json
import logging
import warnings
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from app.logs import CHATTY, configure_logging, log_handler
from app.settings import LoggingSettings, TracingSettings
from app.tracing import Tracing


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """configure_logging changes the process's loggers: put them back afterwards (pytest's
    own capture handler included)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in CHATTY}
    yield
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)
    logging.captureWarnings(False)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_off_a_terminal_each_record_is_one_json_object(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(), stream)
    logger = logging.getLogger("switchboard.test")
    logger.info("job %s done", "archival", extra={"job": "archival", "rows": 3})
    try:
        raise ValueError("multi\nline")
    except ValueError:
        logger.exception("it broke")
    first, second = lines(stream)
    assert first["message"] == "job archival done"
    assert (first["level"], first["logger"]) == ("INFO", "switchboard.test")
    assert (first["job"], first["rows"]) == ("archival", 3)
    assert first["time"].endswith("Z")
    assert datetime.fromisoformat(first["time"]).utcoffset() is not None
    assert "trace_id" not in first  # logged outside any request or job
    assert second["level"] == "ERROR"
    assert "ValueError: multi\nline" in second["exception"]


def test_on_a_terminal_lines_are_text_and_a_setting_forces_either(
    restore_logging: None,
) -> None:
    terminal = Terminal()
    configure_logging(LoggingSettings(), terminal)
    logging.getLogger("switchboard.test").warning("hello", extra={"job": "x"})
    text = terminal.getvalue()
    assert "WARNING switchboard.test  hello  job=x" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)

    forced = Terminal()
    configure_logging(LoggingSettings(format="json"), forced)
    logging.getLogger("switchboard.test").warning("hello")
    assert lines(forced)[0]["message"] == "hello"

    piped = io.StringIO()
    configure_logging(LoggingSettings(format="TEXT"), piped)
    logging.getLogger("switchboard.test").warning("hello")
    assert piped.getvalue().split()[1:] == ["WARNING", "switchboard.test", "hello"]


def test_library_chatter_shows_only_at_debug(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(level="info"), stream)
    logging.getLogger("apscheduler.executors.default").info('Running job "x"')
    logging.getLogger("alembic.runtime.migration").info("Context impl PostgresqlImpl.")
    logging.getLogger("apscheduler.scheduler").warning("missed a run")
    assert [line["message"] for line in lines(stream)] == ["missed a run"]

    verbose = io.StringIO()
    configure_logging(LoggingSettings(level="DEBUG"), verbose)
    logging.getLogger("apscheduler.executors.default").info('Running job "x"')
    assert [line["message"] for line in lines(verbose)] == ['Running job "x"']


def test_a_librarys_warning_is_a_line_in_the_same_format(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(), stream)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("XDG_RUNTIME_DIR is not set", UserWarning, stacklevel=1)
    (line,) = lines(stream)
    assert (line["logger"], line["level"]) == ("py.warnings", "WARNING")
    assert "UserWarning: XDG_RUNTIME_DIR is not set" in line["message"]


def test_a_chore_logs_only_what_went_wrong(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging(LoggingSettings(), stream, chore=True)
    logging.getLogger("switchboard").info("using embedded PostgreSQL")
    logging.getLogger("switchboard").warning("the key file is world-readable")
    assert [line["message"] for line in lines(stream)] == ["the key file is world-readable"]


def test_a_line_written_inside_a_trace_carries_its_id() -> None:
    stream = io.StringIO()
    handler = log_handler(LoggingSettings(format="json"), stream)
    logger = logging.getLogger("switchboard.test.trace")
    logger.addHandler(handler)
    try:
        parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        with Tracing(TracingSettings()).continue_trace(parent, "test") as trace_id:
            logger.warning("inside")
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
    inside, outside = lines(stream)
    assert trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert inside["trace_id"] == trace_id
    assert "trace_id" not in outside


def test_a_bad_format_or_level_is_refused() -> None:
    with pytest.raises(ValueError, match="format"):
        LoggingSettings(format="xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="level"):
        LoggingSettings(level="LOUD")  # type: ignore[arg-type]
