"""Background tasks of the memories app (django-q2). Thin: the work is in services.py."""

from __future__ import annotations

from apps.memories import services


def embed_memories(memory_ids: list[str]) -> int:
    return services.memories_embed(memory_ids)


def decay_and_prune_task() -> dict[str, int]:
    return services.memories_decay_and_prune()
