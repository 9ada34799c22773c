"""Re-embed memories after an embedding model change (or all of them with --all).

Vectors of different models are never compared, so after EMBEDDING_PROVIDER/DIMENSIONS change,
memories embedded by another model are invisible to the dense path until this runs; memories
without token embeddings of the local model (or without the precision model's vectors, where it
runs) get no late-interaction (or precision) rerank of their own until it runs. It creates
the HNSW index for the new dimension count, then embeds in batches (idempotent: run it again
after an interruption). Prints one JSON line.
"""

from __future__ import annotations

import json
import time
import uuid

from django.core.management.base import BaseCommand, CommandError

from apps.memories.embedding.providers import get_provider
from apps.memories.models import Memory
from apps.memories.services import embedding_out_of_date, memories_embed
from apps.memories.vectors import ensure_hnsw_index


class Command(BaseCommand):
    help = "Embed memories whose vector is missing, failed or from another model."

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="Re-embed every memory.")
        parser.add_argument("--project", type=uuid.UUID, help="Only this project id.")
        parser.add_argument("--batch-size", type=int, default=256)

    def handle(self, *args, all: bool, project: uuid.UUID | None, batch_size: int, **options):
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1.")
        provider = get_provider()
        started = time.perf_counter()
        ensure_hnsw_index(provider.dimensions, matryoshka=provider.matryoshka)
        qs = Memory.objects.all()
        if project:
            qs = qs.filter(project_id=project)
        if not all:
            qs = qs.filter(embedding_out_of_date(provider))
        ids = [str(i) for i in qs.order_by("id").values_list("id", flat=True)]
        done = 0
        for start in range(0, len(ids), batch_size):
            done += memories_embed(ids[start : start + batch_size])
        summary = {
            "model": provider.model_id,
            "dimensions": provider.dimensions,
            "selected": len(ids),
            "embedded": done,
            "seconds": round(time.perf_counter() - started, 2),
        }
        self.stdout.write(json.dumps(summary))
