"""Sessions: versioned, conflict-safe coordination state shared by every agent."""
