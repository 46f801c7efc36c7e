"""Coordination: intents, routing, circuit breakers, fallbacks and the message entry point."""
