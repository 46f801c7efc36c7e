"""Agent registry rules: unique names, keys shown once, disabling without forgetting,
routing settings, published and discovered cards and the skill map."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import replace

from app.agents import repository as repo
from app.agents.cards import published_interface, usable_card
from app.agents.schemas import (
    Agent,
    AgentCard,
    AgentCreate,
    AgentSettings,
    AgentWithKey,
    PublishedCard,
    SkillAgents,
)
from app.auth.keycache import KeyCache
from app.auth.keys import generate_key, hash_key, same_digest
from app.auth.principal import ADMIN, ROLES_CHECKED_IN_CODE, Principal
from app.clock import Clock
from app.db.pool import Connection, Database
from app.errors import BadGateway, Conflict, NotFound, ValidationFailed
from app.jobs.sweep import Sweep
from app.outbound.a2a import A2AClient, CardInvalid, CardUnreachable
from app.outbound.policy import OutboundPolicy

logger = logging.getLogger("switchboard.agents")

# Cards fetched at once by a refresh (each within the card timeout).
REFRESH_CONCURRENCY = 10


class AgentService:
    """Registers agents, resolves API keys to principals, keeps routing settings."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        admin_key: str | None,
        *,
        outbound: OutboundPolicy,
        key_cache_seconds: float = 0,
        cards: A2AClient | None = None,
        card_timeout: float = 5.0,
    ) -> None:
        self._db = database
        self._clock = clock
        self._outbound = outbound
        # Fetches agents' A2A cards (discovery); None where nothing discovers.
        self._cards = cards
        self._card_timeout = card_timeout
        # None in a process that answers no requests (the scheduler, the CLI): no key is
        # the admin's there.
        self._admin_digest = None if admin_key is None else hash_key(admin_key)
        self._keys = KeyCache(key_cache_seconds)
        # Key digest -> the lookup in flight for it, shared by whoever needs it meanwhile.
        self._lookups: dict[bytes, asyncio.Task[Principal | None]] = {}
        # Every lookup still running, shared or not (``_changed`` drops them from
        # ``_lookups``): held until they end, and cancelled at ``aclose``.
        self._running: set[asyncio.Task[Principal | None]] = set()

    async def authenticate(self, key_digest: bytes) -> Principal | None:
        """The principal for a key digest, or None if the key is not valid.

        Concurrent misses of one key share one lookup, and a cached key in the last part of
        its life is looked up again in the background while it still answers: at 64
        connections, an entry that ran out sent every request arriving until a lookup came
        back to the pool for a lookup of its own (app/auth/keycache.py)."""
        if self._admin_digest is not None and same_digest(key_digest, self._admin_digest):
            return ADMIN
        keys = self._keys
        cached = keys.get(key_digest)
        if cached is not None:
            if key_digest not in self._lookups and keys.due(key_digest):
                self._look_up(key_digest)
            return cached
        if not keys.enabled:
            # Nothing cached means every request sees the key as of its own arrival: no
            # joining a lookup that began before it.
            return await self._find_principal(key_digest, keys.generation, keys.now())
        lookup = self._lookups.get(key_digest) or self._look_up(key_digest)
        # Shielded: a caller that goes away (a client that disconnected) leaves the lookup
        # to the others waiting for it.
        return await asyncio.shield(lookup)

    def _look_up(self, key_digest: bytes) -> asyncio.Task[Principal | None]:
        """Start the one lookup of ``key_digest`` that concurrent callers share."""
        keys = self._keys
        lookup = asyncio.get_running_loop().create_task(
            self._find_principal(key_digest, keys.generation, keys.now()),
            name="agent-key-lookup",
            # Shared by many requests (or by none, ahead of time): it runs in none of their
            # traces or log contexts.
            context=contextvars.Context(),
        )
        self._lookups[key_digest] = lookup
        self._running.add(lookup)

        def done(task: asyncio.Task[Principal | None]) -> None:
            self._running.discard(task)
            if self._lookups.get(key_digest) is task:
                del self._lookups[key_digest]
            # A refresh ahead of time nobody waits for may fail (the database away): the
            # entry then runs out, and the next request looks the key up and is told why.
            if not task.cancelled() and task.exception() is not None:
                logger.debug("looking an agent key up failed", exc_info=task.exception())

        lookup.add_done_callback(done)
        return lookup

    async def aclose(self) -> None:
        """Cancel the key lookups still running (refreshes nobody waits for) and wait for
        them, before the database they use closes."""
        running = list(self._running)
        for lookup in running:
            lookup.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    async def _find_principal(
        self, key_digest: bytes, generation: int, since: float
    ) -> Principal | None:
        async with self._db.connection() as conn:
            agent = await repo.find_active_agent_by_key_hash(conn, key_digest)
        if agent is None:
            # A key revoked through another replica stops here at the refresh before its
            # entry would have run out.
            self._keys.forget(key_digest, generation=generation)
            return None
        principal = Principal(
            kind="agent", name=agent.name, roles=frozenset(agent.roles), agent_id=agent.agent_id
        )
        self._keys.put(key_digest, principal, since=since, generation=generation)
        return principal

    async def create_agent(self, data: AgentCreate) -> AgentWithKey:
        """Register an agent (or key a seeded one) and return its key, shown only once."""
        key = generate_key()
        now = self._clock.now()
        # No roles sent: a seeded agent keeps the roles it was seeded with.
        roles = None if data.roles is None else sorted(set(data.roles))
        if data.url is not None:
            await self._outbound.require_registrable(str(data.url), "url")
        async with self._db.transaction() as conn:
            if roles:
                await _require_known_roles(conn, roles)
            agent = await repo.insert_agent(conn, data.name, hash_key(key), roles, now)
            if agent is None:
                raise Conflict(
                    f"An agent named {data.name!r} already has a key; use "
                    f"POST /v1/agents/{data.name}/key to issue a new one.",
                    agent=data.name,
                )
            settings = data.model_dump(exclude={"name", "roles", "discover"}, exclude_unset=True)
            if settings:
                agent = await self._apply_settings(conn, agent, AgentSettings(**settings))
        self._changed()
        if data.discover and agent.url:
            # After the registration is committed: a card that cannot be had is the
            # agent's card_status, not a refused registration.
            agent = await self._discover(agent, strict=False)
        return AgentWithKey(agent=agent, api_key=key)

    async def list_agents(self) -> list[Agent]:
        """Every registered agent."""
        async with self._db.connection() as conn:
            return await repo.list_agents(conn)

    async def get_agent(self, name: str) -> Agent:
        """One agent by name (404 if unknown)."""
        async with self._db.connection() as conn:
            agent = await repo.get_agent_by_name(conn, name)
        if agent is None:
            raise NotFound(f"No agent named {name!r}.")
        return agent

    async def update_settings(self, name: str, data: AgentSettings) -> Agent:
        """Change an agent's roles and routing settings; unset fields stay as they are."""
        if data.url is not None:
            await self._outbound.require_registrable(str(data.url), "url")
        async with self._db.transaction() as conn:
            agent = await repo.get_agent_by_name(conn, name)
            if agent is None:
                raise NotFound(f"No agent named {name!r}.")
            updated = await self._apply_settings(conn, agent, data)
        self._changed()  # roles may have changed
        return updated

    async def disable_agent(self, name: str) -> None:
        """Revoke an agent's key; the row stays so history keeps its name."""
        async with self._db.transaction() as conn:
            if not await repo.disable_agent(conn, name, self._clock.now()):
                raise NotFound(f"No agent named {name!r}.")
        self._changed()

    async def rotate_key(self, name: str) -> AgentWithKey:
        """Issue a new key for an agent (the old one stops working) and re-enable it."""
        key = generate_key()
        async with self._db.transaction() as conn:
            agent = await repo.replace_agent_key(conn, name, hash_key(key), self._clock.now())
        self._changed()
        if agent is None:
            raise NotFound(f"No agent named {name!r}.")
        return AgentWithKey(agent=agent, api_key=key)

    async def publish_card(self, name: str, card: AgentCard) -> Agent:
        """Store an agent's A2A card; its url and skills route. Who may (the admin or the
        agent itself) is the route's guard, decided before the body is read."""
        await self._outbound.require_registrable(str(card.url), "url")
        raw = card.model_dump(mode="json", by_alias=True, exclude_none=True)
        skills = [skill.model_dump(mode="json") for skill in card.skills]
        try:
            interface = published_interface(raw)
        except ValueError as exc:
            raise ValidationFailed(
                f"The card's supportedInterfaces are not valid A2A interfaces: {exc}",
                errors=[{"field": "supportedInterfaces", "message": str(exc)[:500]}],
            ) from None
        if interface is not None:
            await self._outbound.require_registrable(interface.url, "supportedInterfaces.url")
        async with self._db.transaction() as conn:
            agent = await repo.set_agent_card(
                conn,
                name,
                raw,
                str(card.url),
                skills,
                card.description,
                self._clock.now(),
                interface.url if interface else None,
                interface.protocol_version if interface else None,
            )
        if agent is None:
            raise NotFound(f"No agent named {name!r}.")
        return agent

    async def get_card(self, name: str) -> PublishedCard:
        """The card an agent published (404 if none)."""
        async with self._db.connection() as conn:
            card = await repo.get_agent_card(conn, name)
        if card is None:
            raise NotFound(f"Agent {name!r} has published no card.")
        return card

    # -- discovery ------------------------------------------------------------------------

    async def discover(self, name: str) -> Agent:
        """Fetch the agent's A2A card from ``<url>/.well-known/agent-card.json``, store it,
        and route by its skills and its JSON-RPC interface. 404 for an unknown agent, 422
        when it has no url or its card cannot be used, 502 when the card cannot be fetched;
        either failure is also recorded on the agent (card_status, card_error)."""
        agent = await self.get_agent(name)
        if not agent.url:
            raise ValidationFailed(
                f"Agent {name!r} has no url to fetch its card from.",
                errors=[{"field": "url", "message": "set the agent's url first"}],
            )
        return await self._discover(agent, strict=True)

    async def refresh_cards(self, sweep: Sweep) -> None:
        """The agent_cards job: fetch again the cards of agents that were discovered (or
        whose discovery failed), marking those whose card cannot be fetched or used."""
        checked_before = sweep.now

        async def refresh() -> int:
            async with self._db.connection() as conn:
                due = await repo.agents_to_refresh(conn, checked_before, 1000)
            gate = asyncio.Semaphore(REFRESH_CONCURRENCY)

            async def one(agent: Agent) -> None:
                async with gate:
                    try:
                        await self._discover(agent, strict=False)
                    except NotFound:
                        pass  # renamed or gone meanwhile: nothing to mark
                    except Exception:  # one agent's trouble is not the run's
                        logger.exception("agent %s: its card could not be refreshed", agent.name)

            await asyncio.gather(*(one(agent) for agent in due))
            return len(due)

        async def count(conn: Connection) -> int:
            return len(await repo.agents_to_refresh(conn, checked_before, 1000))

        await sweep.call_out("agent_cards_checked", refresh, count)

    async def _discover(self, agent: Agent, *, strict: bool) -> Agent:
        """Fetch, check and store ``agent``'s card; a failure is recorded on the agent and,
        when ``strict``, raised (502 unreachable, 422 invalid)."""
        if self._cards is None:
            raise RuntimeError("This process fetches no agent cards.")
        assert agent.url is not None
        status, error = "unreachable", ""
        raised: BadGateway | ValidationFailed | None = None
        try:
            fetched = await self._cards.fetch_card(agent.url, self._card_timeout)
            card = usable_card(fetched)
            refusal = await self._outbound.registration_refusal(card.interface.url)
            if refusal is not None:
                raise CardInvalid(f"its interface URL is not an allowed destination: {refusal}")
        except CardUnreachable as exc:
            status, error = "unreachable", str(exc)
            raised = BadGateway(
                f"The card of agent {agent.name!r} could not be fetched from "
                f"{agent.url.rstrip('/')}/.well-known/agent-card.json: {exc}.",
                agent=agent.name,
                card_status=status,
            )
        except CardInvalid as exc:
            status, error = "invalid", str(exc)
            raised = ValidationFailed(
                f"The card of agent {agent.name!r} cannot be used: {exc}.",
                errors=[{"field": "card", "message": str(exc)[:500]}],
                agent=agent.name,
                card_status=status,
            )
        else:
            async with self._db.transaction() as conn:
                stored = await repo.store_discovered_card(
                    conn,
                    agent.name,
                    card.document,
                    card.skills,
                    card.description,
                    card.interface.url,
                    card.interface.protocol_version,
                    self._clock.now(),
                )
            if stored is None:
                raise NotFound(f"No agent named {agent.name!r}.")
            return stored
        logger.info("agent %s: card %s (%s)", agent.name, status, error)
        async with self._db.transaction() as conn:
            marked = await repo.mark_card_failure(
                conn, agent.name, status, error, self._clock.now()
            )
        if marked is None:
            raise NotFound(f"No agent named {agent.name!r}.")
        if strict and raised is not None:
            raise raised
        return marked

    async def skill_map(self) -> list[SkillAgents]:
        """Every skill offered by an enabled agent, with the agents offering it."""
        skills: dict[str, SkillAgents] = {}
        for agent in await self.list_agents():
            if not agent.enabled:  # as routing sees it: switched off or disabled
                continue
            for skill in agent.skills:
                skill_id = str(skill.get("id"))
                entry = skills.get(skill_id)
                if entry is None:
                    entry = SkillAgents(
                        skill_id=skill_id,
                        name=str(skill.get("name", skill_id)),
                        description=str(skill.get("description", "")),
                        tags=[str(tag) for tag in skill.get("tags", [])],
                        agents=[],
                    )
                    skills[skill_id] = entry
                entry.agents.append(agent.name)
        return sorted(skills.values(), key=lambda s: s.skill_id)

    def _changed(self) -> None:
        """After a change to agents, keys or roles: forget resolved keys. (The coordinator's
        kept agent list needs no call: the agents table announces every change, see
        app/agents/directory.py.)"""
        self._keys.clear()
        # A lookup begun before the change answers those already waiting for it, and
        # nobody after: the next miss looks the key up anew (and the old one stores
        # nothing, ``KeyCache.generation``).
        self._lookups.clear()

    async def _apply_settings(self, conn: Connection, agent: Agent, data: AgentSettings) -> Agent:
        changes = data.model_dump(mode="json", exclude_unset=True)
        if changes.get("roles"):
            changes["roles"] = sorted(set(changes["roles"]))
            await _require_known_roles(conn, changes["roles"])
        if changes.get("fallback_strategy") is not None:
            known = await repo.fallback_strategy_names(conn)
            if changes["fallback_strategy"] not in known:
                raise ValidationFailed(
                    f"Unknown fallback strategy {changes['fallback_strategy']!r}.",
                    errors=[{"field": "fallback_strategy", "message": f"one of {sorted(known)}"}],
                )
        for required in (
            "roles",
            "timeout_ms",
            "retry_attempts",
            "intents",
            "skills",
            "enabled",
            "fail_max",
            "reset_timeout_ms",
            "description",
        ):
            if required in changes and changes[required] is None:
                raise ValidationFailed(
                    f"{required} cannot be null.",
                    errors=[{"field": required, "message": "may not be null"}],
                )
        updated = await repo.update_agent_settings(
            conn, replace(agent, **changes), changes.get("enabled"), self._clock.now()
        )
        if updated is None:
            raise NotFound(f"No agent named {agent.name!r}.")
        return updated


async def _require_known_roles(conn: Connection, roles: list[str]) -> None:
    """A role nothing checks would grant nothing (a typo, usually): 422 naming roles."""
    known = await repo.known_roles(conn, list(ROLES_CHECKED_IN_CODE))
    unknown = [role for role in roles if role not in known]
    if unknown:
        named = ", ".join(repr(role) for role in unknown)
        raise ValidationFailed(
            f"Unknown role{'s' if len(unknown) > 1 else ''} {named}: a role is known when a "
            f"memory access level requires it. The known roles are {', '.join(known)}.",
            errors=[
                {
                    "field": "roles",
                    "message": f"unknown role{'s' if len(unknown) > 1 else ''} {named}; "
                    f"known: {', '.join(known)}",
                }
            ],
            known_roles=known,
        )
