"""Scheduled maintenance: APScheduler triggers that run the maintenance jobs exactly once per
slot across replicas, and the event delivery loop."""
