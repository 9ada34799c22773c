"""Rebuild memories' keyword index and their projects' document frequencies.

For what a data migration did at upgrade, when memories were written meanwhile by servers still on
the old code (a rolling deploy), or as a repair: by default the memories with Chinese, Japanese or
Korean text (memories 0009), with --all every memory. Idempotent; prints one JSON line.
"""

from __future__ import annotations

import json
import time
import uuid

from django.core.management.base import BaseCommand, CommandError

from apps.memories.services import keyword_reindex_ids, memories_reindex_keywords


class Command(BaseCommand):
    help = "Rebuild the keyword index of memories with CJK text (or of all, with --all)."

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="Every memory, not only those with CJK text.")
        parser.add_argument("--project", type=uuid.UUID, help="Only this project id.")
        parser.add_argument("--batch-size", type=int, default=500)

    def handle(self, *args, all: bool, project: uuid.UUID | None, batch_size: int, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        started = time.perf_counter()
        ids = keyword_reindex_ids(project_id=project, cjk_only=not all)
        done = sum(
            memories_reindex_keywords(ids[start : start + batch_size])
            for start in range(0, len(ids), batch_size)
        )
        summary = {
            "selected": len(ids),
            "reindexed": done,
            "seconds": round(time.perf_counter() - started, 2),
        }
        self.stdout.write(json.dumps(summary))
