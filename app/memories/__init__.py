"""Memories: shared facts about users and sessions, with retention and access levels."""
