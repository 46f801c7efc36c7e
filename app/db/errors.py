"""Translate asyncpg and connection failures into domain errors.

Only failures that mean "the database is not there right now" become 503; a constraint
violation that a service did not anticipate stays a bug (500) rather than being guessed at.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from app.errors import Conflict, ServiceUnavailable, ValidationFailed

logger = logging.getLogger("switchboard.db")

_UNAVAILABLE = (
    asyncpg.PostgresConnectionError,  # class 08: connection exceptions
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.QueryCanceledError,  # statement_timeout / command_timeout
    asyncpg.InterfaceError,  # connection closed underneath us
    asyncpg.ConnectionDoesNotExistError,
    ConnectionError,
    OSError,
    asyncio.TimeoutError,
)


def translate(exc: BaseException) -> Exception | None:
    """Return the domain error for a driver exception, or None if it should propagate as is."""
    if isinstance(exc, (asyncpg.SerializationError, asyncpg.DeadlockDetectedError)):
        return Conflict("A concurrent change got in the way; retry the request.", retryable=True)
    if isinstance(exc, asyncpg.DataError):
        # Values the schema rejects (out-of-range numbers, bad text encodings) are input errors.
        # The driver's text names query parameters and internals: logged, not returned.
        logger.info("database rejected a value: %s", exc)
        return ValidationFailed(
            "The database rejected a value: out of range, or not valid for its type.", errors=[]
        )
    if isinstance(exc, _UNAVAILABLE):
        return ServiceUnavailable("The database is unavailable; retry shortly.")
    return None
