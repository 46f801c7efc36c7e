"""``switchboard``: serve the API, apply migrations, manage agents from a shell."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import socket
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from app import runtime
from app.logs import configure_logging
from app.settings import Settings, SettingsInvalid, load_settings

if TYPE_CHECKING:
    from app.agents.schemas import Agent

logger = logging.getLogger("switchboard")


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from app.db.migrate import upgrade
    from app.server import PortUnavailable, bind
    from app.supervisor import worker_count

    host = args.host or settings.server.host
    port = settings.server.port if args.port is None else args.port
    workers = worker_count(settings.server.workers if args.workers is None else args.workers)
    try:
        sock = bind(host, port)  # before anything else: a port in use fails at once
    except PortUnavailable as exc:
        raise CommandFailed(str(exc)) from None
    url = runtime.database_url(settings)
    if not args.no_migrate:
        upgrade(url)
    key = runtime.admin_key(settings)
    run_scheduler = settings.scheduler.enabled and not args.no_scheduler
    run_worker = settings.tasks.enabled and not args.no_worker
    if workers > 1:
        return _serve_workers(settings, sock, url, key, workers, run_scheduler, run_worker)
    from app.asgi import create_app
    from app.server import run, uvicorn_config

    app = create_app(
        settings,
        database_url=url,
        admin_key=key,
        run_scheduler=run_scheduler,
        run_worker=run_worker,
    )
    # "listening" is logged by the server once it listens (app/server.py).
    return 0 if run(uvicorn_config(app, settings.server, host=host, port=port), sock) else 1


def _serve_workers(
    settings: Settings,
    sock: socket.socket,
    url: str,
    key: str,
    workers: int,
    run_scheduler: bool,
    run_worker: bool,
) -> int:
    """``serve --workers N``: N processes on the one socket (app/supervisor.py); the
    scheduler in worker 0 only, a task worker in each."""
    from app.auth.ratelimit import HostBuckets
    from app.logs import mark_worker
    from app.server import run, uvicorn_config
    from app.supervisor import Supervisor, multiprocess_metrics

    _check_connections(settings, url, workers)
    host, port = sock.getsockname()[:2]
    # Made before the fork: every worker (and each one started again) counts a key's
    # requests in the same buckets, so the rate limit is per host.
    rate_buckets = HostBuckets()
    with (
        multiprocess_metrics() as metrics_dir,
        contextlib.closing(sock),
        contextlib.closing(rate_buckets),
    ):
        # Imported once, before the fork: every worker shares the loaded modules.
        from app.asgi import create_app

        def serve(slot: int, listening: Callable[[], None]) -> None:
            mark_worker(slot)
            app = create_app(
                settings,
                database_url=url,
                admin_key=key,
                run_scheduler=run_scheduler and slot == 0,
                run_worker=run_worker,
                rate_buckets=rate_buckets,
            )
            run(uvicorn_config(app, settings.server, host=host, port=port), sock, listening)

        logger.info(
            "serving with %d worker processes",
            workers,
            extra={"workers": workers, "metrics_dir": metrics_dir},
        )
        return Supervisor(workers, serve).run()


def _check_connections(settings: Settings, url: str, workers: int) -> None:
    """Refuse to start N workers whose pools together could open more connections than
    the server allows at all: under load they would fail (503s) instead of queueing."""
    import asyncpg

    from app.supervisor import DEDICATED_CONNECTIONS, connections_needed

    async def limit() -> tuple[int, int]:
        conn = await asyncpg.connect(url)
        try:
            allowed = int(await conn.fetchval("SHOW max_connections"))
            reserved = int(await conn.fetchval("SHOW superuser_reserved_connections"))
            if conn.get_server_version().major >= 16:
                reserved += int(await conn.fetchval("SHOW reserved_connections"))
            return allowed, reserved
        finally:
            await conn.close()

    try:
        allowed, reserved = asyncio.run(limit())
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise CommandFailed(f"cannot reach the database: {exc}") from exc
    pool_max = settings.database.pool_max_size
    needed = connections_needed(workers, pool_max)
    if needed > allowed - reserved:
        raise CommandFailed(
            f"{workers} workers may open {needed} connections ({workers} x "
            f"({pool_max} pooled + {DEDICATED_CONNECTIONS} others)), more than the "
            f"{allowed - reserved} PostgreSQL allows (max_connections {allowed} less "
            f"{reserved} reserved): lower --workers or SWITCHBOARD_DATABASE_POOL_MAX_SIZE, "
            "or raise max_connections"
        )


def _workers(value: str) -> int | str:
    """``--workers``: a number of processes, 0 or ``auto`` for one per CPU."""
    if value == "auto":
        return value
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of workers (or auto)")
    return number


def _scheduler(settings: Settings, _: argparse.Namespace) -> int:
    from app.jobs.process import run_scheduler

    asyncio.run(run_scheduler(settings))
    return 0


def _worker(settings: Settings, _: argparse.Namespace) -> int:
    from app.tasks.process import run_worker

    asyncio.run(run_worker(settings))
    return 0


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    from app.db.migrate import downgrade, upgrade

    url = runtime.database_url(settings)
    if args.down:
        downgrade(url, args.revision or "base")
    else:
        upgrade(url, args.revision or "head")
    return 0


class CommandFailed(Exception):
    """A command could not do what was asked; its message is one line for the user."""


def _agents(settings: Settings, args: argparse.Namespace) -> int:
    import asyncpg

    from app.agents.schemas import AgentCreate
    from app.clock import SystemClock
    from app.db.pool import Database
    from app.errors import SwitchboardError
    from app.services import build_services

    async def run() -> int:
        database = Database(runtime.database_url(settings), settings.database)
        try:
            await database.open()
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise CommandFailed(f"cannot reach the database: {exc}") from exc
        services = build_services(settings, database, SystemClock())
        service = services.agents
        try:
            if args.agents_command == "create":
                created = await service.create_agent(
                    AgentCreate(name=args.name, roles=args.role)  # no --role: keep seeded
                )
                roles = ", ".join(created.agent.roles) or "none"
                print(f"agent {created.agent.name} created (roles: {roles})")
                print(f"API key (shown once, store it now): {created.api_key}")
            elif args.agents_command == "rotate-key":
                created = await service.rotate_key(args.name)
                print(f"new API key for {created.agent.name} (shown once): {created.api_key}")
            elif args.agents_command == "disable":
                await service.disable_agent(args.name)
                print(f"agent {args.name} disabled")
            else:
                print(_agent_table(await service.list_agents()), end="")
        except SwitchboardError as exc:
            raise CommandFailed(_agents_error(args, exc)) from exc
        except asyncpg.UndefinedTableError as exc:
            raise CommandFailed(
                "the database has no Switchboard tables yet; run `switchboard migrate` first"
            ) from exc
        except asyncpg.PostgresError as exc:
            raise CommandFailed(f"the database refused: {exc}") from exc
        finally:
            await services.aclose()
            await database.close()
        return 0

    return asyncio.run(run())


def _agents_error(args: argparse.Namespace, exc: Exception) -> str:
    """The service's error in the CLI's words: commands to run, not HTTP routes."""
    from app.errors import Conflict, NotFound

    name = getattr(args, "name", None)
    if isinstance(exc, Conflict) and exc.extensions.get("agent") == name:
        return (
            f"agent {name} already has a key; use `switchboard agents rotate-key {name}` "
            "to issue a new one"
        )
    if isinstance(exc, NotFound) and name is not None:
        return f"no agent named {name}; `switchboard agents list` shows the registered agents"
    return str(exc)


def _agent_table(agents: Sequence[Agent]) -> str:
    """Agents as a table with a header row, columns aligned (the last one is not padded)."""
    rows = [("NAME", "ROLES", "KEY", "ENABLED", "URL")]
    for agent in agents:
        key = "none" if not agent.has_key else "revoked" if agent.disabled_at else "active"
        rows.append(
            (
                agent.name,
                ",".join(agent.roles) or "-",
                key,
                "yes" if agent.enabled else "no",
                agent.url or "-",
            )
        )
    # Every column but the last is padded to its widest cell; trailing blanks are dropped.
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = []
    for *padded, last in rows:
        cells = [cell.ljust(width) for cell, width in zip(padded, widths, strict=True)]
        lines.append("  ".join([*cells, last]).rstrip() + "\n")
    return "".join(lines)


def _admin_key_path(settings: Settings, _: argparse.Namespace) -> int:
    if settings.auth.admin_key:
        print("SWITCHBOARD_ADMIN_KEY is set; no key file is used.")
    else:
        runtime.admin_key(settings)
        print(runtime.admin_key_path(settings))
    return 0


def _embedded_stop(settings: Settings, _: argparse.Namespace) -> int:
    from app.db.embedded import stop_embedded

    # Refuses (EmbeddedInUse, exit 1) while a live process uses the server: make clean-data
    # must not delete the data directory under it.
    if stop_embedded(settings.data_dir):
        print(f"stopped the embedded PostgreSQL in {settings.data_dir / 'pg'}")
    return 0


def _agent_name(value: str) -> str:
    """An agent name as the registry accepts it (argparse reports a bad one, exit 2)."""
    from app.agents.schemas import AgentName

    return _checked(value, AgentName, "a letter, then letters, digits, _ . or - (100 at most)")


def _role_name(value: str) -> str:
    """A role name as the registry accepts it (argparse reports a bad one, exit 2)."""
    from app.agents.schemas import RoleName

    return _checked(value, RoleName, "lower case: a letter, then letters, digits or _")


def _checked(value: str, annotated: Any, expected: str) -> str:
    """``value`` validated as the registry's own annotated type, or an argparse error."""
    from pydantic import TypeAdapter, ValidationError

    try:
        checked: str = TypeAdapter(annotated).validate_python(value)
    except ValidationError:
        raise argparse.ArgumentTypeError(f"{value!r} is not valid: expected {expected}") from None
    return checked


# Commands whose whole output is their answer on stdout.
_CHORES = frozenset({_agents, _admin_key_path, _embedded_stop})


def build_parser() -> argparse.ArgumentParser:
    """The command-line grammar."""
    parser = argparse.ArgumentParser(prog="switchboard", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="migrate, then serve the API")
    serve.add_argument("--host", help="listen address (default SWITCHBOARD_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (default SWITCHBOARD_PORT or 8080)")
    serve.add_argument("--no-migrate", action="store_true", help="do not apply migrations")
    serve.add_argument(
        "--no-scheduler", action="store_true", help="API only: run the jobs elsewhere"
    )
    serve.add_argument(
        "--no-worker", action="store_true", help="run no task worker here (run `worker` elsewhere)"
    )
    serve.add_argument(
        "--workers",
        type=_workers,
        help="server processes on the one port; 0 or auto: one per CPU "
        "(default SWITCHBOARD_WORKERS or 1)",
    )
    serve.set_defaults(handler=_serve)

    sched = commands.add_parser("scheduler", help="run the maintenance scheduler on its own")
    sched.set_defaults(handler=_scheduler)

    worker = commands.add_parser("worker", help="run a durable task worker on its own")
    worker.set_defaults(handler=_worker)

    migrate = commands.add_parser("migrate", help="apply (or revert) database migrations")
    migrate.add_argument("--down", action="store_true", help="downgrade instead of upgrade")
    migrate.add_argument("revision", nargs="?", help="target revision (head / base by default)")
    migrate.set_defaults(handler=_migrate)

    agents = commands.add_parser("agents", help="manage agents and their API keys")
    agent_commands = agents.add_subparsers(dest="agents_command", required=True)
    create = agent_commands.add_parser("create", help="register an agent; prints its key once")
    create.add_argument("name", type=_agent_name)
    create.add_argument(
        "--role",
        action="append",
        type=_role_name,
        help="a role (repeatable); one some memory access level requires",
    )
    for name, text in (("rotate-key", "issue a new key"), ("disable", "revoke the key")):
        sub = agent_commands.add_parser(name, help=text)
        sub.add_argument("name")
    agent_commands.add_parser("list", help="list agents")
    agents.set_defaults(handler=_agents)

    key = commands.add_parser("admin-key-path", help="print where the admin key is kept")
    key.set_defaults(handler=_admin_key_path)

    stop = commands.add_parser(
        "embedded-stop", help="stop the embedded PostgreSQL (refused while a process uses it)"
    )
    stop.set_defaults(handler=_embedded_stop)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``switchboard`` command."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsInvalid as exc:
        print(f"switchboard: error: {exc}", file=sys.stderr)
        return 2
    # A chore (agents, admin-key-path) prints its answer and nothing else at INFO; the
    # services (serve, scheduler, migrate) log their start-up and what they change.
    configure_logging(settings.logging, chore=args.handler in _CHORES)
    return runtime.run_for_life(lambda: _run(args, settings))


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from app.auth.keys import UnusableAdminKey
    from app.db.embedded import EmbeddedError

    try:
        return int(args.handler(settings, args))
    except (CommandFailed, EmbeddedError, UnusableAdminKey) as exc:
        print(f"switchboard: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
