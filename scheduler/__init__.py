"""``python -m scheduler``: the scheduler process's entry point. The scheduler itself lives
in ``app/jobs`` (this package imports ``app``; ``app`` never imports it)."""
