"""`python -m memorysaas.client` — sync a device replica and search it offline.

Run it with the project's venv (`.venv/bin/python`), which has libsql and httpx:

.venv/bin/python -m memorysaas.client --db memory.db --project $PROJECT_ID sync   # needs MEMORYSAAS_KEY
.venv/bin/python -m memorysaas.client --db memory.db --project $PROJECT_ID search verify_jwt

`sync` reads MEMORYSAAS_KEY (an API key with the sync scope) and MEMORYSAAS_URL (the service,
default http://127.0.0.1:8000).
"""

from __future__ import annotations

import argparse
import os
import sys

from memorysaas.client.replica import Replica, SyncClient

DEFAULT_URL = "http://127.0.0.1:8000"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m memorysaas.client",
        description=__doc__.splitlines()[0],
        epilog=f"sync reads MEMORYSAAS_KEY and MEMORYSAAS_URL (default {DEFAULT_URL}).",
    )
    parser.add_argument("--db", default="memory.db", help="the replica file (libSQL)")
    parser.add_argument("--project", required=True, help="project id")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("sync", help="push offline changes, then pull")
    search = commands.add_parser("search", help="keyword search in the replica, offline")
    search.add_argument("query")
    args = parser.parse_args(argv)

    replica = Replica(args.db, project_id=args.project)
    if args.command == "sync":
        url, key = os.environ.get("MEMORYSAAS_URL", DEFAULT_URL), os.environ.get("MEMORYSAAS_KEY")
        if not key:
            parser.error("set MEMORYSAAS_KEY to an API key with the sync scope")
        report = replica.sync(SyncClient(url, key))
        print(
            f"pushed={report.pushed} pulled={report.pulled} deleted={report.deleted} conflicts={report.conflicts}"
            f" rejected={report.rejected}"
        )
        for conflict in replica.conflicts():
            print(f"conflict {conflict['id']}: {', '.join(conflict['fields'])}")
        for rejected in replica.rejected():
            change = rejected["change"]
            print(f"rejected {change.get('ref') or change.get('id')}: {rejected['reason']['message']}")
        if report.push_error:
            print(
                f"push failed ({report.push_error}); {replica.pending()} changes stay queued", file=sys.stderr
            )
            return 1
        return 0
    found = replica.search_text(args.query)
    for memory_id in found:
        memory = replica.get(memory_id)
        print(f"{memory_id[:8]}  {memory['type']:<16} {memory['content'][:100]}")
    if not found:  # (to stderr: a script reading the results reads none)
        print(f"No memory in {args.db} matches {args.query!r} (run sync first?).", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
