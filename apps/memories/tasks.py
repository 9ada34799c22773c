"""Background tasks of the memories app (django-q2). Thin: the work is in services.py.

Each may run more than once (memorysaas.kernel.queue): embedding writes the same vectors again."""

from __future__ import annotations

from apps.memories import services
from memorysaas.kernel.queue import retry_on_database_error


@retry_on_database_error
def embed_memories(memory_ids: list[str]) -> int:
    return services.memories_embed(memory_ids)


@retry_on_database_error
def embed_pending_memories(memory_ids: list[str]) -> int:
    """The stranded-work sweep's task: only those still pending (the first task may have run)."""
    return services.memories_embed(memory_ids, pending_only=True)


@retry_on_database_error
def embed_stranded_task() -> dict[str, int]:
    return {"queued": services.memories_embed_stranded()}


@retry_on_database_error
def decay_and_prune_task() -> dict[str, int]:
    return services.memories_decay_and_prune()


@retry_on_database_error
def propagate_feedback(feedback_id: int) -> int:
    """Feedback's effect on the memories related to the judged one; applied once however often
    this runs (the feedback row stops being pending)."""
    return len(services.feedback_propagate(feedback_id=feedback_id))


@retry_on_database_error
def propagations_stranded_task() -> dict[str, int]:
    return {"queued": len(services.propagations_stranded())}
