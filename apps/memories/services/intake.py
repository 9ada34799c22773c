"""Taking in what another app learned: the observer's promoted candidates arrive here as drafts,
and this is the one door they come through.

Each draft is scanned for secrets once, embedded as it will be stored (so the vector is the
stored memory's own), and compared with the memories already there: a draft as close as
`novelty` to a stored memory of its type reinforces that memory instead of repeating it, and
one as close to a draft kept before it in the same call is dropped. The rest are written in
one transaction, as `memories_create_batch` writes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from uuid import UUID

import numpy as np
from django.db import connection, transaction

from apps.memories import secrets_scan
from apps.memories.models import Memory
from apps.memories.services.create import _build, _draft_fields, _store
from apps.memories.services.feedback import memory_reinforce
from apps.memories.services.indexing import embedding_text
from apps.memories.validation import MAX_BATCH, MemoryDraft, RelationDraft
from apps.memories.vectors import nearest, vector_literal
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from memorysaas.kernel.errors import Invalid


@dataclass
class Intake:
    """What became of the drafts: `created` pairs each new memory with its draft's index,
    `reinforced` lists the stored memories reinforced instead (each once), `discarded` counts
    the drafts dropped as repeats of one kept before them."""

    created: list[tuple[int, Memory]] = field(default_factory=list)
    reinforced: list[UUID] = field(default_factory=list)
    discarded: int = 0


@transaction.atomic
def memories_take_in(
    *,
    project: Project,
    actor: Principal,
    drafts: Sequence[MemoryDraft],
    novelty: float,
    session_id: str | None = None,
    already: Collection[UUID] = (),
) -> Intake:
    """Store the drafts that are new in `project`, and reinforce (for `session_id`) the stored
    memories the others repeat. `novelty` is the cosine at which two memories of one type say
    the same; `already` names memories the caller has reinforced or created itself, which are
    not reinforced again."""
    from apps.memories.embedding.providers import embed_cached_with_tokens, get_provider

    intake = Intake()
    if not drafts:
        return intake
    if len(drafts) > MAX_BATCH:
        raise Invalid(f"At most {MAX_BATCH} memories per batch.", details={"count": len(drafts)})
    # One secret scan for all of them; the memories are embedded as they will be stored.
    found = secrets_scan.plugin_findings(
        [t for d in drafts for t in secrets_scan.strings(list(_draft_fields(d).values()))]
    )
    built = [_build(project, actor, draft, found) for draft in drafts]
    provider = get_provider()
    vectors, tokens = embed_cached_with_tokens([embedding_text(memory) for memory, _ in built], provider)
    types = [memory.type for memory, _ in built]
    stored_near = _nearest(project.id, types, vectors, provider.model_id, provider.matryoshka, novelty)
    skip = set(already)
    kept: list[tuple[int, tuple[Memory, list[RelationDraft]], np.ndarray, bytes | None]] = []
    for index, (pair, vector, packed, near) in enumerate(
        zip(built, vectors, tokens, stored_near, strict=True)
    ):
        if any(float(np.dot(vector, v)) >= novelty and p[0].type == pair[0].type for _, p, v, _ in kept):
            intake.discarded += 1
            continue
        if near is not None:
            if near not in skip:
                memory_reinforce(memory=Memory.objects.get(id=near), actor=actor, session_id=session_id)
                intake.reinforced.append(near)
                skip.add(near)
            continue
        kept.append((index, pair, vector, packed))
    if kept:
        memories = _store(
            project,
            actor,
            [pair for _, pair, _, _ in kept],
            [vector for _, _, vector, _ in kept],
            [packed for _, _, _, packed in kept],
        )
        intake.created = [(index, memory) for (index, _, _, _), memory in zip(kept, memories, strict=True)]
    return intake


def _nearest(
    project_id: UUID,
    types: list[str],
    vectors: list[np.ndarray],
    model_id: str,
    matryoshka: bool,
    novelty: float,
) -> list[UUID | None]:
    """For each vector, the stored memory of its type at least `novelty` close, if any: one
    statement for all of them (a lateral top-1 per vector, each through the index)."""
    dims = len(vectors[0])
    closest, params = nearest(
        dims,
        columns="id",
        where="project_id = %s AND type = c.type AND deprecated = false AND embedding_dims = %s"
        " AND embedding_model = %s",
        params=[str(project_id), dims, model_id],
        limit=1,
        query="c.vector",
        matryoshka=matryoshka,
    )
    with connection.cursor() as cursor:
        # the connection's iterative-scan settings apply (vectors.set_session_search_params)
        cursor.execute(
            "SELECT c.i, m.id, m.distance FROM unnest(%s::int[], %s::text[], %s::text[]) AS c(i, type, vector)"
            f" CROSS JOIN LATERAL ({closest}) m",
            [list(range(len(types))), types, [vector_literal(v) for v in vectors], *params],
        )
        rows = cursor.fetchall()
    near: list[UUID | None] = [None] * len(types)
    for i, memory_id, distance in rows:
        if 1 - distance >= novelty:
            near[i] = memory_id
    return near
