"""Writes for memories: create, update, delete, feedback (and its propagation to related
memories), reinforcement, file moves, access.

Every write is atomic, scans text for secrets before anything is stored, keeps the keyword
index and its document frequencies in step, increments `version` (keeping the old text in
`MemoryVersion`), writes an audit row and, on commit, queues embedding and a live update.
Permission checks are the caller's: API views check the principal's permission, other apps
(the observer's promotion, the graph's file moves) call these as trusted system code.

One module per topic; callers import from here (`from apps.memories import services`).
"""

from apps.memories.services.create import memories_create_batch, memory_create
from apps.memories.services.feedback import (
    ACCESS_REWARD,
    ACCESSES_FOR_REWARD,
    ACCESSES_TO_CLEAR_REVIEW,
    CONFIDENCE_CAP,
    FLAG_PENALTY,
    UNPACED_ACCESS_GAP,
    memories_record_access,
    memory_dispute_cleared,
    memory_feedback,
    memory_reinforce,
)
from apps.memories.services.files import (
    memories_files_deleted,
    memories_files_renamed,
    memories_files_restored,
)
from apps.memories.services.indexing import (
    STRANDED_BATCH,
    STRANDED_LIMIT,
    embedding_text,
    keyword_reindex_ids,
    memories_embed,
    memories_embed_stranded,
    memories_reindex_keywords,
    memory_embed_retry,
    rebuild_term_stats,
)
from apps.memories.services.intake import Intake, memories_take_in
from apps.memories.services.lifecycle import memories_decay_and_prune
from apps.memories.services.propagation import (
    feedback_propagate,
    propagation_queue,
    propagations_stranded,
)
from apps.memories.services.update import (
    UPDATABLE,
    memory_delete,
    memory_locked,
    memory_update,
    memory_update_with_secrets,
)

__all__ = [
    "ACCESSES_FOR_REWARD",
    "ACCESSES_TO_CLEAR_REVIEW",
    "ACCESS_REWARD",
    "CONFIDENCE_CAP",
    "FLAG_PENALTY",
    "Intake",
    "STRANDED_BATCH",
    "STRANDED_LIMIT",
    "UNPACED_ACCESS_GAP",
    "UPDATABLE",
    "embedding_text",
    "feedback_propagate",
    "keyword_reindex_ids",
    "memories_create_batch",
    "memories_decay_and_prune",
    "memories_embed",
    "memories_embed_stranded",
    "memories_files_deleted",
    "memories_files_renamed",
    "memories_files_restored",
    "memories_record_access",
    "memories_reindex_keywords",
    "memories_take_in",
    "memory_create",
    "memory_delete",
    "memory_dispute_cleared",
    "memory_embed_retry",
    "memory_feedback",
    "memory_locked",
    "memory_reinforce",
    "memory_update",
    "memory_update_with_secrets",
    "propagation_queue",
    "propagations_stranded",
    "rebuild_term_stats",
]
