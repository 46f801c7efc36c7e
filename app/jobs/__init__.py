"""Scheduled jobs: the job table, exactly-once slot claims, the runner that calls the
services' sweeps in bounded batches, and the APScheduler triggers."""
