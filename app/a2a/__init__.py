"""Switchboard as an A2A 1.0 server (docs/a2a.md): the card, the JSON-RPC route and the
request handler over the coordinator and the durable tasks."""
