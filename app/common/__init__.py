"""Small HTTP-level helpers shared by every feature."""
