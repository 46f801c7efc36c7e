"""Webhook endpoints for n8n: coordination, memory and cleanup, with idempotency and
optional HMAC signatures."""
