"""The object graph of one process, built in one place.

Every entry point builds its services with ``build_services``: the API (``app/asgi.py``),
the scheduler process (``app/jobs/process.py``, behind ``python -m scheduler`` and
``switchboard scheduler``) and the CLI's chores (``app/cli.py``). What each one starts is
its own business (the API starts presence, lease renewal, the breakers' listener and, when
configured, the scheduler); how the services are made and who gets which is written once,
here. Building is cheap and opens nothing: the database pool is the caller's, and the HTTP
client opens connections only when a call is made (``aclose`` releases it).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket

from app.a2a.messages import A2AMessages
from app.a2a.push import PushConfigs
from app.agents.directory import AgentDirectory
from app.agents.service import AgentService
from app.branches.service import BranchService
from app.clock import Clock
from app.coordination.breaker_admin import BreakerAdmin
from app.coordination.breakers import BreakerRegistry
from app.coordination.completion import TaskCompletion
from app.coordination.dispatch import AgentClient
from app.coordination.escalation import EscalationService
from app.coordination.rules import RulesService
from app.coordination.service import CoordinationService
from app.coordination.target import TurnTargets
from app.coordination.tasks import COORDINATOR_KINDS, AgentTasks
from app.db.pool import Database
from app.db.presence import ReplicaPresence
from app.erasure.service import ErasureService
from app.events.hub import EventHub
from app.events.service import EventService
from app.events.streams import EventStreams
from app.jobs.service import JobService
from app.memories.branch_service import BranchMemoryService
from app.memories.retention import MemoryRetention
from app.memories.service import MemoryService
from app.outbound.a2a import A2AClient, a2a_http_client
from app.outbound.policy import OutboundPolicy, Resolver
from app.outbound.transport import outbound_client
from app.sessions.lifecycle import SessionLifecycle
from app.sessions.service import SessionService
from app.settings import Settings
from app.tasks.agent_call import AgentCall
from app.tasks.service import TaskService
from app.tracing import Tracing
from app.users.service import UserService
from app.webhooks.idempotency import IdempotencyService
from app.webhooks.service import WebhookService


def replica_name() -> str:
    """A name for this process in claims and breaker records: host, pid and a random tag."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Services:
    """Every service of one process and what they share. Build it with ``build_services``."""

    def __init__(
        self,
        settings: Settings,
        database: Database,
        clock: Clock,
        *,
        admin_key: str | None,
        replica: str,
        resolver: Resolver | None,
        tracing: Tracing | None,
    ) -> None:
        self.replica = replica
        # The process's tracer: spans of requests, job runs, agent calls and (while
        # exporting, between its start and shutdown) queries.
        self.tracing = tracing or Tracing(settings.tracing)
        self.outbound = OutboundPolicy(settings.outbound, resolver)
        # One HTTP client for every agent call and event delivery: connection reuse, no
        # per-call set-up, the outbound policy on every connection, a client span (and the
        # traceparent it sends) per call. Deadlines are set per call (an agent's
        # timeout_ms, the delivery timeout), not by httpx.
        self.http = outbound_client(self.outbound, tracing=self.tracing)
        # A2A agents (SendMessage, card discovery) through the a2a-sdk client: the same
        # policy and tracing on a client of its own (app/outbound/a2a.py says why).
        self.a2a = A2AClient(
            a2a_http_client(self.outbound, settings.max_body_bytes, tracing=self.tracing)
        )
        # The agent list the coordinator routes by, kept while LISTEN tells of changes.
        self.agent_directory = AgentDirectory(
            database, sync_interval=settings.coordination.breaker_sync_seconds
        )
        self.agents = AgentService(
            database,
            clock,
            admin_key,
            outbound=self.outbound,
            key_cache_seconds=settings.auth.key_cache_seconds,
            cards=self.a2a,
            card_timeout=settings.coordination.card_timeout_seconds,
        )
        self.users = UserService(database, clock)
        self.sessions = SessionService(database, clock, settings.sessions)
        self.branches = BranchService(
            database, clock, settings.sessions, settings.memories.max_content_bytes
        )
        self.session_lifecycle = SessionLifecycle(
            database, clock, settings.sessions, settings.scheduler
        )
        self.memories = MemoryService(database, clock, settings.memories)
        self.branch_memories = BranchMemoryService(database, clock, self.memories)
        self.memory_retention = MemoryRetention(settings.scheduler)
        self.erasure = ErasureService(database, clock, settings.database.erasure_timeout)
        self.breakers = BreakerRegistry(
            database,
            clock,
            sync_interval=settings.coordination.breaker_sync_seconds,
            replica_id=replica,
        )
        self.breaker_admin = BreakerAdmin(self.agents, self.breakers)
        self.rules = RulesService(database, clock, settings.coordination.rules_cache_seconds)
        self.agent_client = AgentClient(
            self.http,
            # An agent may answer as much as a client may send; its broken JSON is
            # repaired up to the repair bound.
            max_answer_bytes=settings.max_body_bytes,
            repair_max_bytes=settings.coordination.repair_max_bytes,
            a2a=self.a2a,
        )
        # Durable agent tasks: every process can submit, run (its worker, or run_here)
        # and wait for them; the handlers of the kinds are registered here.
        self.tasks = TaskService(
            database, clock, settings.tasks, replica, self.tracing, self.agents, self.sessions
        )
        self.agent_call = AgentCall(self.agents, self.breakers, self.agent_client, clock)
        self.tasks.register("agent_call", self.agent_call)
        self.events = EventService(database, clock, settings.scheduler, self.http, self.outbound)
        self.push_configs = PushConfigs(database, clock, self.tasks, self.outbound)
        # Event streams: one hub (one LISTEN connection) per process, started by the first
        # stream; the streams it feeds.
        self.event_hub = EventHub(database, settings.streams)
        self.event_streams = EventStreams(database, self.event_hub, self.sessions, settings.streams)
        # The coordinator's agent calls are tasks (kinds message, handoff, pending_action):
        # one attempt each (agent_tasks), and, for a task whose caller stopped waiting,
        # its end applied to the session and announced (task_completion).
        self.agent_tasks = AgentTasks(self.tasks, self.agent_call)
        # The next-step decision and manual intervention (escalate, resolve).
        self.escalation = EscalationService(
            database, clock, settings.coordination, settings.sessions
        )
        # Where a turn is read and written: the session itself or one of its branches.
        self.turn_targets = TurnTargets(
            database,
            self.sessions,
            self.memories,
            self.branches,
            self.branch_memories,
            settings.coordination.branch_context_memories,
        )
        self.task_completion = TaskCompletion(
            database,
            clock,
            self.turn_targets,
            self.breakers,
            self.events,
            self.rules,
            self.escalation,
        )
        for kind in COORDINATOR_KINDS:
            self.tasks.register(kind, self.agent_tasks.attempt, self.task_completion.finished)
        self.coordinator = CoordinationService(
            database,
            clock,
            settings.coordination,
            self.sessions,
            self.turn_targets,
            self.rules,
            self.breakers,
            self.agent_client,
            self.agent_tasks,
            self.escalation,
            self.agent_directory,
        )
        lease = settings.webhooks.idempotency_lease
        # One connection per replica, outside the pool: its lock says this process is alive.
        self.presence = ReplicaPresence(
            database.url,
            replica,
            check_interval=lease.total_seconds() / 3,
            connect_timeout=settings.database.acquire_timeout,
        )
        self.idempotency = IdempotencyService(
            database, clock, settings.webhooks.idempotency_ttl, lease, self.presence
        )
        # A2A messages resent with the same messageId are answered once (the same keys).
        self.a2a_messages = A2AMessages(self.tasks, self.idempotency)
        # The jobs call the sweeps of the services above (app/jobs/table.py), found on this
        # object when a job runs.
        self.jobs = JobService(database, clock, settings.scheduler, replica, self)
        self.webhooks = WebhookService(
            database,
            clock,
            settings.webhooks.continuation_window,
            self.users,
            self.sessions,
            self.coordinator,
            self.memories,
            self.jobs,
            self.idempotency,
        )

    async def aclose(self) -> None:
        """Release what the services hold (the HTTP client's connections), and export the
        spans still buffered (blocking up to the exporter's timeout: not on the loop)."""
        await self.agents.aclose()
        await self.http.aclose()
        await self.a2a.aclose()
        await asyncio.to_thread(self.tracing.shutdown)


def build_services(
    settings: Settings,
    database: Database,
    clock: Clock,
    *,
    admin_key: str | None = None,
    replica: str | None = None,
    resolver: Resolver | None = None,
    tracing: Tracing | None = None,
) -> Services:
    """Every service, wired. ``admin_key`` is the key that authenticates as the admin (None
    in processes that answer no requests: nobody is the admin there); ``replica`` names
    this process in claims (default: host, pid and a random tag); ``resolver`` turns host
    names into addresses for the outbound policy (default: the system resolver);
    ``tracing`` is built from ``settings.tracing`` unless given (tests collect spans)."""
    return Services(
        settings,
        database,
        clock,
        admin_key=admin_key,
        replica=replica or replica_name(),
        resolver=resolver,
        tracing=tracing,
    )
