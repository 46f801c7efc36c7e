"""Scheduled maintenance jobs (inactivity timeout, expiry, archival, retention).

The jobs arrive with the scheduler capability; this package is their home.
"""
