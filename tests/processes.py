"""For tests that start other processes (daphne, a probe script) on the test database."""

from __future__ import annotations

import socket
from urllib.parse import quote

from django.db import connection


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_url() -> str:
    """The test database as a URL another process can use (a socket directory as the host)."""
    db = connection.settings_dict
    host = quote(db["HOST"], safe="") if db["HOST"].startswith("/") else db["HOST"]
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql://{quote(db['USER'], safe='')}{password}@{host}{port}/{db['NAME']}"
