"""Serve one benchmark target the same way for every target: uvicorn, one worker, uvloop,
httptools, no access log. ``python -m bench.serve ceiling|switchboard PORT``."""

from __future__ import annotations

import os
import sys

import uvicorn


def main() -> None:
    """Start the named target on 127.0.0.1:PORT."""
    target, port = sys.argv[1], int(sys.argv[2])
    if target == "ceiling":
        from bench.ceiling import app
    else:
        from app.asgi import create_app
        from app.settings import Settings

        app = create_app(
            Settings(),
            database_url=os.environ["SWITCHBOARD_DATABASE_URL"],
            admin_key=os.environ["SWITCHBOARD_ADMIN_KEY"],
            run_scheduler=False,
        )
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        workers=1,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
        server_header=False,
    )


if __name__ == "__main__":
    main()
