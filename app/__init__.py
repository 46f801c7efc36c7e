"""Switchboard: session coordination for multi-agent AI systems."""
