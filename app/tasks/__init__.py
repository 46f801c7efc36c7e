"""Durable agent tasks: the queue, its worker and reaper, retries and dead letters."""
