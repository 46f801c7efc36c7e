"""Maintenance: the scheduled jobs' bodies, their exactly-once claims, the session archive
and restore, and the event outbox."""
