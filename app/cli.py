"""``switchboard``: serve the API, apply migrations, manage agents from a shell."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from app import runtime
from app.settings import Settings


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    from app.asgi import create_app
    from app.db.migrate import upgrade

    url = runtime.database_url(settings)
    if not args.no_migrate:
        upgrade(url)
    app = create_app(
        settings,
        database_url=url,
        admin_key=runtime.admin_key(settings),
        run_scheduler=settings.scheduler.enabled and not args.no_scheduler,
    )
    host = args.host or settings.server.host
    port = args.port or settings.server.port
    print(f"Switchboard listening on http://{host}:{port}  (OpenAPI: /schema)", flush=True)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=settings.server.log_level.lower(),
        proxy_headers=False,
        server_header=False,
    )
    return 0


def _scheduler(settings: Settings, _: argparse.Namespace) -> int:
    from scheduler.__main__ import run

    asyncio.run(run(settings))
    return 0


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    from app.db.migrate import downgrade, upgrade

    url = runtime.database_url(settings)
    if args.down:
        downgrade(url, args.revision or "base")
    else:
        upgrade(url, args.revision or "head")
    return 0


def _agents(settings: Settings, args: argparse.Namespace) -> int:
    from app.agents.schemas import AgentCreate
    from app.agents.service import AgentService
    from app.clock import SystemClock
    from app.db.pool import Database

    async def run() -> int:
        database = Database(runtime.database_url(settings), settings.database)
        await database.open()
        try:
            service = AgentService(database, SystemClock(), runtime.admin_key(settings))
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
                for agent in await service.list_agents():
                    key = (
                        "no key" if not agent.has_key else "revoked" if agent.disabled_at else "key"
                    )
                    print(
                        f"{agent.name}\t{','.join(agent.roles) or '-'}\t{key}\t{agent.url or '-'}"
                    )
        finally:
            await database.close()
        return 0

    return asyncio.run(run())


def _admin_key_path(settings: Settings, _: argparse.Namespace) -> int:
    if settings.auth.admin_key:
        print("SWITCHBOARD_ADMIN_KEY is set; no key file is used.")
    else:
        runtime.admin_key(settings)
        print(runtime.admin_key_path(settings))
    return 0


def _embedded_stop(settings: Settings, _: argparse.Namespace) -> int:
    from app.db.embedded import stop_embedded

    stop_embedded(settings.data_dir)
    return 0


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
    serve.set_defaults(handler=_serve)

    sched = commands.add_parser("scheduler", help="run the maintenance scheduler on its own")
    sched.set_defaults(handler=_scheduler)

    migrate = commands.add_parser("migrate", help="apply (or revert) database migrations")
    migrate.add_argument("--down", action="store_true", help="downgrade instead of upgrade")
    migrate.add_argument("revision", nargs="?", help="target revision (head / base by default)")
    migrate.set_defaults(handler=_migrate)

    agents = commands.add_parser("agents", help="manage agents and their API keys")
    agent_commands = agents.add_subparsers(dest="agents_command", required=True)
    create = agent_commands.add_parser("create", help="register an agent; prints its key once")
    create.add_argument("name")
    create.add_argument("--role", action="append", help="a role (repeatable)")
    for name, text in (("rotate-key", "issue a new key"), ("disable", "revoke the key")):
        sub = agent_commands.add_parser(name, help=text)
        sub.add_argument("name")
    agent_commands.add_parser("list", help="list agents")
    agents.set_defaults(handler=_agents)

    key = commands.add_parser("admin-key-path", help="print where the admin key is kept")
    key.set_defaults(handler=_admin_key_path)

    stop = commands.add_parser("embedded-stop", help="stop the embedded PostgreSQL")
    stop.set_defaults(handler=_embedded_stop)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``switchboard`` command."""
    args = build_parser().parse_args(argv)
    settings = Settings()
    logging.basicConfig(
        level=settings.server.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(settings, args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
