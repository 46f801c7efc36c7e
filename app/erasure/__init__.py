"""Erasure: the right to be forgotten, for a user or only their memories."""
