"""How `manage.py up` starts the web server: daphne with the upload cap (webapp/server.py).

docker/compose.yml runs the same module.
"""

from __future__ import annotations

import sys


def web_server_argv(host: str, port: int) -> list[str]:
    return [
        sys.executable, "-m", "webapp.server", "-b", host, "-p", str(port), "webapp.asgi:application"
    ]  # fmt: skip
