"""Typed settings, grouped by concern and read from ``SWITCHBOARD_*`` environment variables.

Settings are built once by the entry point (CLI, tests) and passed down; nothing reads the
environment at import time.
"""

from __future__ import annotations

import os
from datetime import timedelta
from importlib.util import find_spec
from ipaddress import IPv4Network, IPv6Network
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, NonNegativeInt, PositiveInt, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

_CHECKOUT = Path(__file__).resolve().parent.parent
_INSTALLED = not (_CHECKOUT / "alembic.ini").is_file()

# Where alembic.ini, migrations/ and sql/ are: the checkout's root when Switchboard runs from a
# clone (make run, an editable install), else the copy that the wheel carries inside the
# package (setup.py puts them in app/_project when it builds one).
PROJECT_ROOT = Path(__file__).resolve().parent / "_project" if _INSTALLED else _CHECKOUT


def _default_data_dir() -> Path:
    """A clone keeps its data beside the code (.switchboard, ignored by git); an installed
    package has no folder of its own to write to, so it uses the user's data folder."""
    if not _INSTALLED:
        return _CHECKOUT / ".switchboard"
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "switchboard"


def _comma_separated(value: Any) -> Any:
    """``a, b,c`` from the environment as a list; a list stays as it is."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class ServerSettings(BaseSettings):
    """Where the HTTP API listens and what it accepts."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_", extra="ignore", env_ignore_empty=True
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    # Request bodies above this get 413. Unset: room for the largest memory content plus
    # its envelope (Settings.max_body_bytes).
    max_body_bytes: PositiveInt | None = None
    # After an answer given before the request body was read (413, 401, 404, ...), read and
    # discard the rest of the body, at most this many bytes for at most this long, before
    # finishing the answer. A client that writes its whole body before reading (urllib,
    # requests, httpx) then reads the answer instead of a connection reset. 0 turns it off.
    linger_max_bytes: NonNegativeInt = 64 * 1024 * 1024
    linger_seconds: float = Field(default=5.0, ge=0)
    # What a request head may be before anything else is read (app/server.py; nginx's
    # limits are the model). More header fields, or more bytes of request line and fields:
    # 431 (414 for a request target alone over the bytes). Not whole within the timeout of
    # the connection's start (or of a later request's first byte): 408 and close.
    max_header_fields: PositiveInt = 100
    max_header_bytes: PositiveInt = 16 * 1024
    header_timeout: float = Field(default=10.0, gt=0)
    # Seconds a kept-alive connection may stay idle between requests (uvicorn's default).
    keep_alive_timeout: PositiveInt = 5
    # Connections open at once, or requests in progress, per server process; one more is
    # answered 503 and closed. Each costs a file descriptor (ulimit -n must be above this).
    max_connections: PositiveInt = 1000
    # Requests per second each key may make (per replica), and the burst it may save up;
    # 0 turns rate limiting off.
    rate_limit_per_second: float = Field(default=100.0, ge=0)
    rate_limit_burst: PositiveInt = 200
    # GET /metrics (Prometheus text, no key); false removes the route.
    metrics_enabled: bool = True
    # After start-up, move every object alive then (modules, routes, schemas) out of the
    # cyclic garbage collector's reach (gc.freeze): full collections stop re-scanning them,
    # which took the p99 of a 20-row memory list from about 55 ms to about 22 ms here.
    # Tests turn it off: they build hundreds of apps in one process.
    gc_freeze: bool = True
    # Server processes accepting on the one port (``switchboard serve --workers``): each
    # builds its own app and pool (app/supervisor.py). 0 or "auto": one per CPU.
    workers: NonNegativeInt | Literal["auto"] = 1
    # Addresses or networks of the reverse proxies in front (comma-separated, e.g.
    # ``10.0.0.0/8,127.0.0.1``). From a peer in one of them, X-Forwarded-For names the
    # client (its nearest address not in the list) and X-Forwarded-Proto the scheme: the
    # console's sign-in limit counts per client then, and its cookie is Secure behind an
    # HTTPS proxy. From any other peer the headers are ignored. Empty: none trusted.
    trusted_proxies: Annotated[list[IPv4Network | IPv6Network], NoDecode] = Field(
        default_factory=list
    )

    _split_proxies = field_validator("trusted_proxies", mode="before")(_comma_separated)


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class LoggingSettings(BaseSettings):
    """What the processes log and how (app/logs.py): one line per record on stderr."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_LOG_", extra="ignore", env_ignore_empty=True
    )

    # INFO is quiet in steady state: start-up, job runs that changed something, requests
    # (see access), warnings. DEBUG adds the libraries' own chatter (APScheduler, alembic).
    level: LogLevel = "INFO"
    # json: one JSON object per line; text: compact lines for a person; auto: text when
    # stderr is a terminal, else json.
    format: Literal["auto", "json", "text"] = "auto"
    # One INFO line per HTTP request (method, route, status, duration, trace id).
    access: bool = True

    @field_validator("level", mode="before")
    @classmethod
    def _level_in_any_case(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("format", mode="before")
    @classmethod
    def _format_in_any_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


TraceExporter = Literal["none", "otlp", "console"]
TraceSampler = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]


class TracingSettings(BaseSettings):
    """Spans and their export (app/tracing.py), read from OpenTelemetry's own variables
    (``OTEL_*``, as every OpenTelemetry SDK reads them), so a deployment configures
    Switchboard like its other services. Trace ids are kept whatever is set here; only
    exporting is off by default. The OTLP exporter itself reads the standard
    ``OTEL_EXPORTER_OTLP_*`` endpoint, headers, timeout and compression variables."""

    model_config = SettingsConfigDict(env_prefix="OTEL_", extra="ignore", env_ignore_empty=True)

    # Where finished spans go: none (the default: spans are made and dropped), otlp
    # (OTLP over HTTP/protobuf, the switchboard[otlp] extra), console (stdout, for a
    # person); comma-separated for several.
    traces_exporter: Annotated[list[TraceExporter], NoDecode] = Field(
        default_factory=lambda: list[TraceExporter](["none"]), min_length=1
    )
    service_name: str = Field(default="switchboard", min_length=1)
    # Which traces are recorded; with parentbased_*, a caller's sampled flag decides.
    traces_sampler: TraceSampler = "parentbased_always_on"
    # The ratio of the *traceidratio samplers.
    traces_sampler_arg: float = Field(default=1.0, ge=0, le=1)
    # Only OTLP over HTTP with protobuf is installed; gRPC and JSON are refused by name.
    exporter_otlp_protocol: Literal["http/protobuf"] = "http/protobuf"
    exporter_otlp_traces_protocol: Literal["http/protobuf"] = "http/protobuf"

    @field_validator("traces_exporter", mode="before")
    @classmethod
    def _exporter_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip().lower() for part in value.split(",") if part.strip()]
        return value

    @field_validator("traces_sampler", mode="before")
    @classmethod
    def _sampler_in_any_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("traces_exporter")
    @classmethod
    def _otlp_installed(cls, value: list[str]) -> list[str]:
        if "otlp" in value and find_spec("opentelemetry.exporter.otlp.proto.http") is None:
            raise ValueError(
                "otlp needs the OTLP exporter, which is not installed: "
                "pip install 'switchboard[otlp]'"
            )
        return value

    @property
    def exporting(self) -> bool:
        """Whether finished spans go anywhere."""
        return any(name != "none" for name in self.traces_exporter)


class DatabaseSettings(BaseSettings):
    """PostgreSQL connection. With no URL, an embedded server is started (app/db/embedded.py)."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_DATABASE_", extra="ignore", env_ignore_empty=True
    )

    url: str | None = None
    pool_min_size: int = Field(default=2, ge=0)
    pool_max_size: PositiveInt = 10
    # Seconds a statement may run before the request fails with 503.
    command_timeout: float = Field(default=10.0, gt=0)
    # The same for the statements of an erasure that scan whole tables for a user's ids
    # (sql/queries/erasure.sql): the audit trail takes about 6 s per million rows.
    erasure_timeout: float = Field(default=300.0, gt=0)
    # Seconds a request waits for a free pool connection before 503.
    acquire_timeout: float = Field(default=5.0, gt=0)
    # Prepared statements kept per connection (the named queries number over 100).
    statement_cache_size: int = Field(default=512, ge=0)


class AuthSettings(BaseSettings):
    """The admin key; agent keys live (hashed) in the database."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_", extra="ignore", env_ignore_empty=True
    )

    admin_key: str | None = Field(default=None, min_length=16)
    # Used when SWITCHBOARD_ADMIN_KEY is unset: read, or generated on first start (mode 0600).
    # Defaults to <data_dir>/admin.key.
    admin_key_file: Path | None = None
    # Seconds a resolved agent key is trusted without asking the database again. Changes
    # made through this replica apply at once; through another one, within this time.
    # 0 looks every request's key up.
    key_cache_seconds: float = Field(default=5.0, ge=0, le=300)


class SessionSettings(BaseSettings):
    """Session lifetime rules (seed: 24 h default expiry, 4 h extension for active processes)."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_SESSION_", extra="ignore", env_ignore_empty=True
    )

    default_ttl: timedelta = timedelta(hours=24)
    max_ttl: timedelta = timedelta(days=30)
    active_process_extension: timedelta = timedelta(hours=4)
    # A session keeps its last N agent executions; older ones stay in its version history
    # and its decision log. Unbounded, every message would rewrite an ever longer row and
    # copy it into the version history (storage growing with the square of the turns).
    agent_sequence_limit: PositiveInt = 100
    # How a write based on an older version is treated when the request does not say
    # (Prefer: merge=auto|strict): strict refuses it (409), auto merges it three-way when
    # its change and the changes since touch different paths (docs/design.md, "Auto-merge").
    merge_default: Literal["strict", "auto"] = "strict"
    # An open branch with no write for this long is deleted by the sessions sweep, unless
    # its session is preserved.
    branch_idle_ttl: timedelta = timedelta(days=7)


class MemorySettings(BaseSettings):
    """Limits of the memory API (seed: content at most 1 MB)."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_MEMORY_", extra="ignore", env_ignore_empty=True
    )

    max_content_bytes: PositiveInt = 1024 * 1024
    # Default byte budget of GET /v1/sessions/{id}/context when the caller names none.
    context_default_max_bytes: PositiveInt = 64 * 1024


class CoordinationSettings(BaseSettings):
    """Intent prioritization and agent dispatch."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_COORDINATION_", extra="ignore", env_ignore_empty=True
    )

    # How many memories an agent's request shows on a branch (POST
    # .../branches/{branch}/messages): the newest the agent may read as the branch sees
    # them, its own values over main's (0: none).
    branch_context_memories: int = Field(default=50, ge=0, le=1000)
    # Ask the user instead of guessing when the top two conflicting intents score closer
    # than this (0: never ask).
    clarification_margin: int = Field(default=10, ge=0, le=100)
    # The agent asked to classify intents first, when it has a url.
    classifier_agent: str = "Intent_Session_Agent"
    # Agent for messages no intent or skill claims.
    default_agent: str = "Orchestrator_Agent"
    # Seconds the compiled intent rules are reused before being re-read.
    rules_cache_seconds: float = Field(default=5.0, ge=0)
    # Seconds between re-reads of the shared breaker states (besides LISTEN/NOTIFY).
    breaker_sync_seconds: float = Field(default=5.0, gt=0)
    # A queued action claimed by POST .../pending/next whose worker died is taken over
    # after this long (longer than an agent call may take: timeout_ms is at most 5 min,
    # and a direct routing makes two calls).
    pending_claim_timeout: timedelta = timedelta(minutes=15)
    # An agent answer that is not valid JSON (cut off, a trailing comma, single quotes, a
    # markdown fence around it) is repaired with json-repair when it is at most this long;
    # a longer one is a malformed answer at once. Repair is pure Python and grows faster
    # than linearly on hostile input (about 0.2 s for 64 KiB at worst, measured, against
    # 1.5 s for 256 KiB), so the bound is the worst time an answer can cost. 0: never.
    repair_max_bytes: NonNegativeInt = 64 * 1024
    # Seconds a message (POST .../messages, the n8n coordination webhook) waits for its
    # agent's task before the rule-based fallback answers (degraded, with the task id) and
    # the task goes on in the background. Under n8n's webhook timeout with room to spare;
    # a caller asks for another wait with `Prefer: wait=N` (RFC 7240), capped below.
    wait_default_seconds: float = Field(default=8.0, ge=0, le=3600)
    # The most a caller may ask to wait (Prefer: wait=N above it waits this long): under the
    # 60 s most HTTP clients and proxies (and n8n's HTTP node) give a request.
    wait_max_seconds: float = Field(default=55.0, ge=0, le=3600)
    # How long fetching an agent's A2A card may take (discovery and the agent_cards job).
    card_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    # Safety limits of the next-step decision (app/coordination/next_step.py): past one,
    # the session is escalated and waits for a person. Each is an "at most"; the counters
    # are read from the decision log and the versions and start again at a resolution.
    # Retries of the same step (intent and agent) after its first failure: seed 001's
    # max_retries, 3 (the fourth failure in a row of one step asks for a person).
    max_step_retries: int = Field(default=3, ge=0, le=1000)
    # Fallback answers in a row (no agent answer between them).
    max_consecutive_fallbacks: int = Field(default=5, ge=1, le=1000)
    # Handoffs while progress_percentage does not rise (seed 001's min_check_frequency:
    # 15 steps without a check).
    max_handoffs_without_progress: int = Field(default=15, ge=1, le=10_000)
    # Time since progress_percentage last rose (or the session began, or was resolved):
    # the default session lifetime.
    max_age_without_progress: timedelta = Field(default=timedelta(hours=24), gt=timedelta(0))


class SchedulerSettings(BaseSettings):
    """Maintenance jobs: when they run and what they touch (defaults from the seed)."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_SCHEDULER_", extra="ignore", env_ignore_empty=True
    )

    # Run the jobs inside `switchboard serve` (false: run `python -m scheduler` separately).
    enabled: bool = True
    # Rows per batch transaction. Each batch also commits and records progress, so small
    # batches pay that overhead often (5,000: 1.8x a single DELETE over 1M expired memories;
    # 20,000: 1.4x); a batch of expired sessions, the heaviest, takes about 2 s at 20,000.
    batch_size: PositiveInt = 20_000
    # A claim whose process stops renewing it is taken over after this long.
    lease: timedelta = timedelta(minutes=5)
    inactivity_interval: timedelta = timedelta(minutes=5)
    inactivity_threshold: timedelta = timedelta(hours=2)
    extension_interval: timedelta = timedelta(minutes=5)
    extension_recent_activity: timedelta = timedelta(minutes=30)
    extension_period: timedelta = timedelta(hours=4)
    expiry_interval: timedelta = timedelta(hours=1)
    archival_interval: timedelta = timedelta(days=1)
    completed_retention: timedelta = timedelta(days=30)
    retention_interval: timedelta = timedelta(hours=1)
    memory_archive_retention: timedelta = timedelta(days=365)
    warning_interval: timedelta = timedelta(minutes=5)
    warning_window: timedelta = timedelta(minutes=15)
    # How long an expired or archived session can still be restored.
    recovery_window: timedelta = timedelta(days=7)
    # Event delivery to subscribers.
    delivery_interval: timedelta = timedelta(seconds=5)
    delivery_max_attempts: PositiveInt = 8
    delivery_timeout: timedelta = timedelta(seconds=10)
    # Housekeeping: what the service itself records is kept this long, then purged daily.
    housekeeping_interval: timedelta = timedelta(days=1)
    audit_retention: timedelta = timedelta(days=365)
    event_retention: timedelta = timedelta(days=30)
    job_run_retention: timedelta = timedelta(days=90)
    # The agent_cards job: how often discovered agents' A2A cards are fetched again.
    agent_cards_interval: timedelta = timedelta(minutes=15)


class TaskSettings(BaseSettings):
    """Durable agent tasks (app/tasks/): the worker each process runs, leases, retries.

    Per-agent overrides are maps from agent name to a number, JSON in the environment:
    ``SWITCHBOARD_TASKS_AGENT_CONCURRENCY='{"Make_Plan_Agent": 2}'``."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_TASKS_", extra="ignore", env_ignore_empty=True
    )

    # Run a worker in this process (`switchboard serve --no-worker` turns it off too).
    enabled: bool = True
    # Attempts one worker runs at once.
    worker_concurrency: PositiveInt = 20
    # Attempts of one agent's tasks running at once over all workers (the seed's agent
    # capacity); a task of an agent at its limit is skipped, not waited for.
    agent_concurrency_default: PositiveInt = 10
    agent_concurrency: dict[str, PositiveInt] = Field(default_factory=dict)
    # A running attempt holds its task this long and renews it every third of it; a task
    # whose replica stopped renewing (killed) goes back to the queue as a new attempt.
    lease_seconds: float = Field(default=30.0, ge=0.5)
    # Seconds between looks at the queue when no notification came (a missed NOTIFY, a
    # retry whose backoff ended); also how often expired leases are reaped.
    poll_interval: float = Field(default=1.0, gt=0)
    # Retries after the first attempt (the seed: 5), and per agent; backoff before retry n
    # is uniform in [0, min(cap, base * 2**(n-1))] (exponential, full jitter).
    max_retries: NonNegativeInt = Field(default=5, le=99)
    agent_max_retries: dict[str, Annotated[int, Field(ge=0, le=99)]] = Field(default_factory=dict)
    retry_base_seconds: float = Field(default=1.0, gt=0)
    retry_cap_seconds: float = Field(default=60.0, gt=0)

    def concurrency_for(self, agent_name: str) -> int:
        """How many attempts of ``agent_name`` may run at once."""
        return self.agent_concurrency.get(agent_name, self.agent_concurrency_default)

    def max_attempts_for(self, agent_name: str) -> int:
        """Attempts a new task of ``agent_name`` gets: one plus its retries."""
        return 1 + self.agent_max_retries.get(agent_name, self.max_retries)


class StreamSettings(BaseSettings):
    """Server-Sent Event streams of the outbox (app/events/hub.py, app/events/streams.py)."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_STREAM_", extra="ignore", env_ignore_empty=True
    )

    # A comment line is sent on a stream that has had nothing to send for this long, so
    # proxies and clients do not take it for a dead connection.
    keepalive_seconds: float = Field(default=15.0, gt=0, le=3600)
    # Streams one key may hold open at once on one replica; one more is answered 429.
    max_per_key: PositiveInt = 10
    # Events waiting to be written to one stream. A client that reads so slowly that this
    # many pile up is disconnected (it reconnects with Last-Event-ID and catches up from
    # the table): memory per stream stays bounded.
    queue_events: PositiveInt = 1000
    # A stream ends after this long (0: never); EventSource reconnects by itself with
    # Last-Event-ID, and the connection moves to whichever replica takes it.
    max_seconds: float = Field(default=3600.0, ge=0)
    # The reconnection delay sent to clients (the SSE retry field), in milliseconds.
    retry_ms: NonNegativeInt = 2000
    # Events read per query: catch-up pages, the hub's reads, the numbering's batches.
    batch: PositiveInt = Field(default=500, le=10_000)
    # Even when nothing announced new events (a write from psql or another tool, a NOTIFY
    # lost while the LISTEN connection was down), the hub numbers and reads new events
    # this often (app/db/announce.py).
    sync_seconds: float = Field(default=1.0, gt=0)


class WebhookSettings(BaseSettings):
    """The /webhooks/n8n endpoints."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_WEBHOOK_", extra="ignore", env_ignore_empty=True
    )

    # A message without session_id continues the user's latest open session of the same
    # type if it was active this recently; otherwise a new session starts.
    continuation_window: timedelta = timedelta(minutes=30)
    # How long a response stored under an Idempotency-Key is replayed.
    idempotency_ttl: timedelta = timedelta(hours=24)
    # A key in progress is held by a lease its replica renews every lease/3 while the
    # request runs. A retry takes the key over at once when the holder's process died, and
    # after this long when the holder is alive but stopped renewing (frozen, cut off from
    # PostgreSQL). Shorter frees such keys sooner but lets a replica stalled this long
    # (a pause, a database outage) be taken over while its request still runs.
    idempotency_lease: timedelta = Field(default=timedelta(seconds=15), gt=timedelta(0))
    # Shared secret for optional HMAC signatures (X-Switchboard-Signature).
    secret: str | None = Field(default=None, min_length=16)
    # Refuse unsigned calls (needs a secret).
    require_signature: bool = False
    # Signed calls older (or newer) than this are replays.
    signature_tolerance: timedelta = timedelta(minutes=5)


class ConsoleSettings(BaseSettings):
    """The operator console at /console (app/console)."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_CONSOLE_", extra="ignore", env_ignore_empty=True
    )

    # Serve /console at all.
    enabled: bool = True
    # How long a sign-in lasts; the cookie and its signed expiry both end then.
    session_seconds: int = Field(default=8 * 3600, ge=1, le=7 * 24 * 3600)
    # Signs the console's session cookies. Unset: derived from the admin key, so every
    # replica that shares the admin key accepts the same cookies, and a new admin key
    # signs everyone out.
    secret: str | None = Field(default=None, min_length=32)
    # Failed sign-ins an address may make: this many a minute once its burst is spent (0
    # turns the limit off). A correct key spends nothing, but is refused too while the
    # address is over the limit: otherwise the 429 would tell a guesser which key was right.
    login_failures_per_minute: float = Field(default=6.0, ge=0)
    login_failure_burst: PositiveInt = 10


Scheme = Literal["http", "https"]
_SCHEMES: tuple[Scheme, ...] = ("http", "https")


class OutboundSettings(BaseSettings):
    """Where Switchboard may send session data: agent URLs and event subscribers.

    Checked when a URL is registered (422) and on every connection, against the addresses
    the host resolves to then. Cloud metadata addresses, "this network" (0.0.0.0/8),
    multicast, broadcast and reserved addresses are refused whatever is set here. Lists
    are comma-separated in the environment."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_OUTBOUND_", extra="ignore", env_ignore_empty=True
    )

    allowed_schemes: Annotated[list[Scheme], NoDecode] = Field(
        default_factory=lambda: list(_SCHEMES), min_length=1
    )
    # Set, they are the only destinations: a host name listed (``*.example.com`` for any
    # name below it) or an address in a network listed. They never reopen a denied address.
    allow_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    allow_networks: Annotated[list[IPv4Network | IPv6Network], NoDecode] = Field(
        default_factory=list
    )
    # Refused on top of the built-in refusals.
    deny_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    deny_networks: Annotated[list[IPv4Network | IPv6Network], NoDecode] = Field(
        default_factory=list
    )
    # 127.0.0.0/8 and ::1: other services on Switchboard's own host. Off by default; an
    # n8n on the same machine (``make run`` beside ``n8n start``) needs it on.
    allow_loopback: bool = False
    # 10/8, 172.16/12, 192.168/16, fc00::/7 and 100.64/10: agents are usually n8n
    # workflows and services on the same private network, so on by default.
    allow_private: bool = True
    # 169.254/16 and fe80::/10 (cloud metadata lives there).
    allow_link_local: bool = False
    # Seconds a registration waits for a host name to resolve; a name that does not
    # resolve in time is accepted (connections are checked again).
    resolve_timeout: float = Field(default=2.0, gt=0, le=30)

    _split_lists = field_validator(
        "allowed_schemes",
        "allow_hosts",
        "allow_networks",
        "deny_hosts",
        "deny_networks",
        mode="before",
    )(_comma_separated)


# What a body carries besides a memory's content: the other fields of a memory write, a
# by-key upsert or the webhook's memory request (ids, names, a key: under 2 KiB), with room
# to spare for whitespace around them.
BODY_ENVELOPE_BYTES = 64 * 1024


class Settings(BaseSettings):
    """All settings; each group reads its own prefix."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_", extra="ignore", env_ignore_empty=True
    )

    data_dir: Path = Field(default_factory=_default_data_dir)
    server: ServerSettings = Field(default_factory=ServerSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    memories: MemorySettings = Field(default_factory=MemorySettings)
    coordination: CoordinationSettings = Field(default_factory=CoordinationSettings)
    scheduler: SchedulerSettings = Field(default_factory=SchedulerSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    tasks: TaskSettings = Field(default_factory=TaskSettings)
    streams: StreamSettings = Field(default_factory=StreamSettings)
    outbound: OutboundSettings = Field(default_factory=OutboundSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)

    @property
    def max_body_bytes(self) -> int:
        """The request body limit: ``SWITCHBOARD_MAX_BODY_BYTES`` if set, else the memory
        content limit plus ``BODY_ENVELOPE_BYTES``, so the largest content can arrive."""
        if self.server.max_body_bytes is not None:
            return self.server.max_body_bytes
        return self.memories.max_content_bytes + BODY_ENVELOPE_BYTES


class SettingsInvalid(Exception):
    """An environment variable holds a value the settings refuse; the message names it."""


# A group's validation error is titled with its class name; its variables share a prefix.
_GROUPS: tuple[type[BaseSettings], ...] = (
    Settings,
    ServerSettings,
    LoggingSettings,
    TracingSettings,
    DatabaseSettings,
    AuthSettings,
    SessionSettings,
    MemorySettings,
    CoordinationSettings,
    SchedulerSettings,
    TaskSettings,
    StreamSettings,
    WebhookSettings,
    OutboundSettings,
)
_PREFIXES = {group.__name__: str(group.model_config.get("env_prefix", "")) for group in _GROUPS}
# Values never echoed back: they may be credentials.
_SECRET_WORDS = ("key", "secret", "url", "password")


def load_settings() -> Settings:
    """The settings from the environment, or ``SettingsInvalid`` naming every variable that
    is wrong and why, in one line (a command prints it instead of a traceback)."""
    try:
        return Settings()
    except ValidationError as exc:
        prefix = _PREFIXES.get(exc.title, "SWITCHBOARD_")
        problems = []
        for error in exc.errors(include_url=False):
            name = (prefix + "_".join(str(part) for part in error["loc"])).upper()
            problem = f"{name}: {error['msg']}"
            if not any(word in name.lower() for word in _SECRET_WORDS):
                problem += f" (got {error['input']!r})"
            problems.append(problem)
        raise SettingsInvalid("; ".join(problems)) from None
