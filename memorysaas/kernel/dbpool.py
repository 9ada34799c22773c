"""Sweeping the web server's idle pooled connections once the database has failed a request.

The pool checks a connection before handing it out (CONN_HEALTH_CHECKS) and replaces one that
fails. But after a database restart every idle connection is dead, and a request that draws
them one after another waits the pool's back-off between them (1 s, then 2 s) until its
timeout: with twenty dead in the pool, request after request failed that way for tens of
seconds after the database was back. So the first request the database fails (the API answers
it 503) has the pool test all its idle connections in one pass, in the background
(`ConnectionPool.check()`: a round trip each, a few ms in all), and the dead ones are replaced.
Sweeping on a timer instead would cost nothing useful while all is well, and each
`check()` also grows the pool by a connection.
"""

from __future__ import annotations

import logging
import threading

from django.db import DEFAULT_DB_ALIAS, connections
from psycopg_pool import ConnectionPool

logger = logging.getLogger(__name__)

_sweeping = threading.Lock()


def sweep_soon() -> None:
    """Check the idle pooled connections in a background thread (one sweep at a time; nothing
    without an open pool)."""
    pool = connections[DEFAULT_DB_ALIAS].pool
    if pool is None or pool.closed or not _sweeping.acquire(blocking=False):
        return
    threading.Thread(target=_sweep, args=(pool,), name="db-pool-sweep", daemon=True).start()


def _sweep(pool: ConnectionPool) -> None:
    try:
        pool.check()
    except Exception:  # the next failing request sweeps again
        logger.exception("Checking the pooled database connections failed")
    finally:
        _sweeping.release()
