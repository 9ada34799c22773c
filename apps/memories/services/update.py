"""Changing and deleting a memory: a version row keeps the old text, a changed text is indexed
and embedded again, and the change is audited."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from apps.memories.kinds import default_half_life
from apps.memories.models import (
    EmbeddingStatus,
    Memory,
    MemoryScope,
    MemoryUsage,
    MemoryVersion,
)
from apps.memories.services.indexing import _adjust_term_stats, _announce, _schedule_embedding, _search_vector
from apps.memories.services.redaction import _redacted_fields
from apps.memories.validation import (
    MemoryDraft,
    short_citation,
)
from apps.tenants.principal import Principal
from apps.tenants.services import audit_record
from memorysaas.kernel.errors import Conflict, Invalid, field_errors

# Fields whose change alters what the memory says, so its index and embedding are rebuilt.
_TEXT_FIELDS = {"content", "type", "tags", "related_files", "related_modules", "citation_text", "payload"}


def _snapshot(memory: Memory, change: str, actor: Principal) -> MemoryVersion:
    return MemoryVersion(
        memory=memory,
        version=memory.version,
        type=memory.type,
        content=memory.content,
        confidence=memory.confidence,
        tags=list(memory.tags),
        related_files=list(memory.related_files),
        change=change,
        changed_by=actor.label,
    )


def memory_locked(memory: Memory) -> Memory:
    """The memory as it is now, its row locked until the caller's transaction ends: what a
    permission check reads must be what the change then applies to."""
    return Memory.objects.select_for_update().get(pk=memory.pk)


def _save_change(memory: Memory, actor: Principal, change: str, fields: set[str]) -> Memory:
    """Bump the version, keep history, persist `fields`, reindex and re-embed if text moved."""
    text_changed = bool(fields & _TEXT_FIELDS)
    if text_changed:
        _adjust_term_stats([memory.id], -1)
        memory.search_vector = _search_vector(memory)
        memory.embedding_status = EmbeddingStatus.PENDING
        fields = {*fields, "search_vector", "embedding_status"}
    memory.version += 1
    try:
        memory.save(update_fields=[*fields, "version", "updated_at"])
    finally:
        if text_changed:
            memory.search_vector = None
    _snapshot(memory, change, actor).save()
    if text_changed:
        _adjust_term_stats([memory.id], +1)
        _schedule_embedding([memory.id])
    _announce(memory.project_id, ("memory.updated", [memory]))
    return memory


UPDATABLE = {
    "content", "type", "tags", "related_files", "related_modules", "payload", "citation_text",
    "confidence", "scope", "needs_review", "pinned", "deprecated", "decay_half_life_days",
    "work_unit_ref", "methodology", "commit_sha",
}  # fmt: skip


@transaction.atomic
def memory_update(
    *, memory: Memory, actor: Principal, changes: dict[str, Any], change: str = "updated"
) -> Memory:
    """Apply `changes` (a subset of UPDATABLE), validated as a whole draft; new version.

    A change to the text fields re-indexes and re-embeds. Raises `Invalid` for unknown fields
    or a result that is not a valid memory.
    """
    return _update(memory, actor, changes, change)[0]


@transaction.atomic
def memory_update_with_secrets(
    *, memory: Memory, actor: Principal, changes: dict[str, Any], change: str = "updated"
) -> tuple[Memory, list[str]]:
    """memory_update, and the kinds of the secrets redacted from the change (a memory they were
    taken from waits for a steward's review: a caller must not clear it)."""
    return _update(memory, actor, changes, change)


def _fits_the_memory_as_it_is(errors: list[dict[str, Any]], changes: dict[str, Any]) -> bool:
    """Whether a change's errors are about what it leaves as it is (its type, when the change
    sends a payload alone; its payload, when the change sends a type alone): a conflict with the
    memory's state, not a change that is wrong in itself."""
    judged_alone = set(changes) - ({"payload"} if "type" not in changes else set())
    return any(not error["loc"] or error["loc"][0] not in judged_alone for error in errors)


def _update(
    memory: Memory, actor: Principal, changes: dict[str, Any], change: str
) -> tuple[Memory, list[str]]:
    """memory_update's work (in the caller's transaction), and the secret kinds the change
    brought (a correction with one waits for review)."""
    unknown = sorted(set(changes) - UPDATABLE)
    if unknown:
        raise Invalid("These fields cannot be changed.", details={"fields": unknown})
    memory = memory_locked(memory)
    current = {
        "content": memory.content,
        "type": memory.type,
        "tags": memory.tags,
        "related_files": memory.related_files,
        "related_modules": memory.related_modules,
        "payload": memory.payload,
        "citation_text": memory.citation_text,
        "confidence": memory.confidence,
        "scope": memory.scope,
    }
    # A citation made from the old content's start is made again from the new one: /context
    # would otherwise hand agents the corrected fact under the words of the wrong one. A citation
    # someone wrote stays; one cleared is made from the content, as at create.
    cleared = "citation_text" in changes and not (changes["citation_text"] or "").strip()
    remake = cleared or (
        "content" in changes
        and "citation_text" not in changes
        and memory.citation_text == short_citation(memory.content)
    )
    draft_fields = {**current, **{k: v for k, v in changes.items() if k in current}}
    try:
        draft = MemoryDraft(**draft_fields)
    except ValidationError as exc:
        errors = field_errors(exc.errors())
        if _fits_the_memory_as_it_is(errors, changes):
            raise Conflict("The change does not fit the memory as it is.", details=errors) from None
        raise Invalid("The memory would not be valid.", details=errors) from None
    changed: set[str] = set()
    texts = {k: getattr(draft, k) for k in current if k in changes}
    texts |= {k: v for k, v in changes.items() if k in ("methodology", "commit_sha", "work_unit_ref")}
    clean, kinds = _redacted_fields(texts, known=memory.secret_kinds)
    if remake:  # (from the redacted content, as at create)
        clean["citation_text"] = short_citation(clean.get("content", memory.content))
    if "scope" in clean:
        clean["scope"] = draft.scope.value
        if clean["scope"] == MemoryScope.TEAM:
            if memory.project.team_id is None:
                raise Conflict(
                    "Team scope needs a project that belongs to a team.", details={"field": "scope"}
                )
            memory.team_id = memory.project.team_id
            changed.add("team")
        if clean["scope"] == MemoryScope.PERSONAL and memory.owner_id is None:
            raise Conflict("Only a memory with an owner can be personal.", details={"field": "scope"})
    for name, value in clean.items():
        if getattr(memory, name) != value:
            setattr(memory, name, value)
            changed.add(name)
    # A half-life that was the old type's default becomes the new type's (one set by hand stays).
    by_type = memory.decay_half_life_days == default_half_life(current["type"])
    if "type" in changed and "decay_half_life_days" not in changes and by_type:
        changes = {**changes, "decay_half_life_days": default_half_life(memory.type)}
    for name in ("needs_review", "pinned", "decay_half_life_days"):
        if name in changes and getattr(memory, name) != changes[name]:
            setattr(memory, name, changes[name])
            changed.add(name)
    if "deprecated" in changes and memory.deprecated != bool(changes["deprecated"]):
        memory.deprecated = bool(changes["deprecated"])
        memory.deprecated_at = timezone.now() if memory.deprecated else None
        changed |= {"deprecated", "deprecated_at"}
        if not memory.deprecated:  # brought back: not retired again by tonight's job
            _restart_clock(memory)
    if kinds:
        memory.secrets_redacted = True
        memory.secret_kinds = sorted(set(memory.secret_kinds) | set(kinds))
        memory.needs_review = True
        changed |= {"secrets_redacted", "secret_kinds", "needs_review"}
    if not changed:
        return memory, kinds
    if "content" in changed or ("needs_review" in changed and memory.needs_review):
        # New text, or someone put it back in review: the accesses that earned the old text its
        # confidence and cleared its review do not vouch for this.
        MemoryUsage.objects.filter(memory=memory).update(uncorrected_access_count=0)
    _save_change(memory, actor, change, changed)
    audit_record(actor=actor, action=f"memory.{change}", target=memory, metadata={"fields": sorted(changed)})
    return memory, kinds


@transaction.atomic
def memory_delete(*, memory: Memory, actor: Principal) -> None:
    """Remove a memory for good (its relations, history and feedback go with it)."""
    _adjust_term_stats([memory.id], -1)
    audit_record(actor=actor, action="memory.deleted", target=memory, metadata={"type": memory.type})
    gone = Memory(  # (Model.delete() clears the pk)
        id=memory.id, scope=memory.scope, project_id=memory.project_id,
        organization_id=memory.organization_id, team_id=memory.team_id,
    )  # fmt: skip
    project_id = memory.project_id
    memory.delete()
    _announce(project_id, ("memory.deleted", [gone]))


def _restart_clock(memory: Memory) -> None:
    """The memory counts as used now: decay and the daily job's three half-lives start again."""
    MemoryUsage.objects.update_or_create(memory=memory, defaults={"last_accessed_at": timezone.now()})
