"""Background loops (LISTEN, the presence lock, lease renewals): how they are stopped."""

from __future__ import annotations

import asyncio
import contextlib

# How long a loop is given to end by itself before it is cancelled.
GRACE_SECONDS = 10


async def stop_loop(task: asyncio.Task[None], stopping: asyncio.Event) -> None:
    """Ask the loop ``task`` to end (it checks ``stopping``) and wait for it; cancel it only
    if it has not ended within GRACE_SECONDS. Asked, not cancelled: a cancelled
    asyncpg.connect() can leave a future whose error nobody retrieves."""
    stopping.set()
    try:
        await asyncio.wait_for(task, timeout=GRACE_SECONDS)
    except TimeoutError:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
