"""Database access: the pool, the named-query loader and driver-error translation."""
