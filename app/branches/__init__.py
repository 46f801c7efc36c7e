"""Branches of a session: fork, write, merge, rebase, delete."""
