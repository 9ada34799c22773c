"""Writes: open, comment on and resolve disputes; mark notifications read; set a trust level."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from apps.governance import selectors
from apps.governance.models import (
    Dispute,
    DisputeComment,
    DisputeStatus,
    EntryKind,
    ProjectTrust,
    Resolution,
    TrustChange,
    TrustLevel,
)
from apps.governance.notify import notify, project_stewards
from apps.governance.trust import allowed_levels, project_offer
from apps.memories import secrets_scan
from apps.memories import selectors as memory_selectors
from apps.memories import services as memory_services
from apps.memories.models import FeedbackKind, Memory, MemoryScope
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from apps.tenants.services import audit_record, require
from memorysaas.kernel import events as org_events
from memorysaas.kernel.errors import Conflict, Invalid
from memorysaas.kernel.realtime import publish


def dispute_url(dispute: Dispute) -> str:
    project = dispute.project
    return reverse(
        "dispute_detail",
        kwargs={
            "org_slug": project.organization.slug,
            "project_slug": project.slug,
            "dispute_id": dispute.id,
        },
    )


def _user(actor: Principal):
    return actor.user if actor.user is not None and actor.user.pk else None


def _entry(dispute: Dispute, actor: Principal, kind: str, body: str) -> DisputeComment:
    return DisputeComment.objects.create(
        organization_id=dispute.organization_id,
        dispute=dispute,
        author=_user(actor),
        author_label=_label(actor),
        kind=kind,
        body=body,
    )


def _label(actor: Principal) -> str:
    user = _user(actor)
    if user is not None:
        return (getattr(user, "name", "") or user.email or actor.label)[:120]
    return actor.label


def _announce(dispute: Dispute, event: str, extra: dict[str, Any] | None = None) -> None:
    data = {
        "dispute_id": dispute.id,
        "memory_id": dispute.memory_id,
        "status": dispute.status,
        **(extra or {}),
    }
    transaction.on_commit(lambda: publish(dispute.project_id, event, data))
    org_events.emit(
        dispute.organization_id, event, {"project_id": dispute.project_id, **data}, only_known=True
    )


def _participants(dispute: Dispute) -> list:
    """The opener, everyone who wrote in the thread, and the project's stewards."""
    users = [dispute.opened_by, *project_stewards(dispute.project)]
    users += [c.author for c in dispute.comments.select_related("author") if c.author is not None]
    return users


def _redacted(text: str) -> str:
    """What a person wrote in a dispute's thread, as it is stored, mailed and shown: a pasted
    credential becomes its marker, as in a memory."""
    return secrets_scan.scan(text.strip()).text


@transaction.atomic
def dispute_open(*, memory: Memory, actor: Principal, reason: str) -> Dispute:
    """Open a dispute: the memory gets its `disputed` badge (retrieval ×0.8) through the memories
    feedback service, the thread starts, stewards are notified in-app and by email."""
    require(actor, memory.organization_id, Perm.MEMORIES_WRITE)
    if memory.scope == MemoryScope.PERSONAL:  # (stewards would be told of what only its owner may see)
        raise Conflict(
            "A personal memory is yours alone: correct, flag or delete it instead of disputing it.",
            details={"field": "memory"},
        )
    reason = _redacted(reason)
    if not reason:
        raise Invalid("Say why the memory is wrong.", details={"field": "reason"})
    if Dispute.objects.filter(memory=memory, status=DisputeStatus.OPEN).exists():
        raise Conflict("This memory already has an open dispute; comment on it instead.")
    memory = memory_services.memory_feedback(
        memory=memory, actor=actor, kind=FeedbackKind.DISPUTE, note=reason
    )
    dispute = Dispute.objects.create(
        organization_id=memory.organization_id,
        project_id=memory.project_id,
        memory=memory,
        opened_by=_user(actor),
        opened_by_label=_label(actor),
        reason=reason,
    )
    _entry(dispute, actor, EntryKind.OPENED, reason)
    stewards = [u for u in project_stewards(memory.project) if u != _user(actor)]
    notify(
        project=memory.project,
        users=stewards,
        kind="dispute.opened",
        title=f"{dispute.opened_by_label} disputed a memory in {memory.project.name}",
        body=f"Memory: {memory.content[:300]}\n\nReason: {reason[:1000]}",
        url=dispute_url(dispute),
    )
    audit_record(actor=actor, action="dispute.opened", target=dispute)
    _announce(dispute, "dispute.opened")
    return dispute


@transaction.atomic
def dispute_comment(*, dispute: Dispute, actor: Principal, body: str) -> DisputeComment:
    require(actor, dispute.organization_id, Perm.MEMORIES_WRITE)
    body = _redacted(body)
    if not body:
        raise Invalid("A comment needs text.", details={"field": "body"})
    comment = _entry(dispute, actor, EntryKind.COMMENT, body)
    others = [u for u in _participants(dispute) if u != _user(actor)]
    notify(
        project=dispute.project,
        users=others,
        kind="dispute.commented",
        title=f"{comment.author_label} commented on a dispute in {dispute.project.name}",
        body=body[:1000],
        url=dispute_url(dispute),
    )
    Dispute.objects.filter(pk=dispute.pk).update(updated_at=timezone.now())
    _announce(dispute, "dispute.commented", {"comment_id": comment.pk})
    return comment


def _apply(memory: Memory, actor: Principal, resolution: str, changes: dict[str, Any]) -> None:
    secrets: list[str] = []
    if resolution == Resolution.UPDATE:
        if not changes:
            raise Invalid("An update needs the memory's new content or fields.", details={"field": "changes"})
        memory = memory_services.memory_locked(memory)  # (an edit committed meanwhile counts)
        before = memory.version
        memory, secrets = memory_services.memory_update_with_secrets(
            memory=memory, actor=actor, changes=changes, change="dispute_update"
        )
        if memory.version == before:  # (the dispute's transaction is rolled back)
            raise Conflict(
                "The update changes nothing: edit the memory so it says what is right, or reject the dispute.",
                details={"field": "changes"},
            )
    elif resolution == Resolution.DEPRECATE:
        memory = memory_services.memory_update(
            memory=memory, actor=actor, changes={"deprecated": True}, change="dispute_deprecate"
        )
    if not Dispute.objects.filter(memory=memory, status=DisputeStatus.OPEN).exists():
        memory_services.memory_dispute_cleared(memory_id=memory.pk)
        # A secret taken out of the new text waits for a steward's review, as after any write;
        # and a resolver may ask for the review to stay.
        if secrets or changes.get("needs_review") is True:
            return
        memory_services.memory_update(
            memory=memory_selectors.memory_by_id(memory.pk),
            actor=actor,
            changes={"needs_review": False},
            change="dispute_closed",
        )


@transaction.atomic
def dispute_resolve(
    *,
    dispute: Dispute,
    actor: Principal,
    resolution: str,
    note: str = "",
    changes: dict[str, Any] | None = None,
) -> Dispute:
    """Close a dispute: update the memory, deprecate it, or reject the dispute. Stewards,
    admins and owners resolve an open dispute; an admin or owner may override a closed one
    (the earlier outcome stays in the thread). The disputed badge goes once no dispute is open."""
    require(actor, dispute.organization_id, Perm.MEMORIES_REVIEW)
    resolution = Resolution(resolution).value
    if changes and resolution != Resolution.UPDATE:  # (not dropped: the caller meant them)
        raise Invalid(
            "Changes go with the resolution 'update' only: deprecating or rejecting leaves the text as it is.",
            details={"field": "changes"},
        )
    dispute = (
        Dispute.objects.select_for_update(of=("self",))
        .select_related("project__organization")
        .get(pk=dispute.pk)
    )
    override = not dispute.is_open
    if override:
        require(actor, dispute.organization_id, Perm.ADMIN)
        _entry(
            dispute,
            actor,
            EntryKind.OVERRIDDEN,
            f"Earlier outcome '{dispute.get_resolution_display()}' by {dispute.resolved_by_label} overridden.",
        )
    dispute.status = DisputeStatus.REJECTED if resolution == Resolution.REJECT else DisputeStatus.RESOLVED
    dispute.resolution = resolution
    dispute.resolution_note = _redacted(note)
    dispute.resolved_by = _user(actor)
    dispute.resolved_by_label = _label(actor)
    dispute.resolved_at = timezone.now()
    dispute.override = dispute.override or override
    dispute.save()
    _apply(memory_selectors.memory_by_id(dispute.memory_id), actor, resolution, changes or {})
    outcome = dispute.get_resolution_display()
    _entry(dispute, actor, EntryKind.RESOLVED, f"{outcome}. {dispute.resolution_note}".strip())
    notify(
        project=dispute.project,
        users=[u for u in _participants(dispute) if u != _user(actor)],
        kind="dispute.resolved",
        title=f"Dispute in {dispute.project.name}: {outcome.lower()}",
        body=dispute.resolution_note,
        url=dispute_url(dispute),
    )
    audit_record(
        actor=actor,
        action="dispute.resolved",
        target=dispute,
        metadata={"resolution": resolution, "override": override},
    )
    _announce(dispute, "dispute.resolved", {"resolution": resolution, "override": override})
    return dispute


def notifications_mark_read(*, user, ids: list[int] | None = None, key=None) -> int:
    """Mark the user's notifications read: the listed ones, or all when `ids` is None (through
    an API key, only within the key's organization or project)."""
    qs = selectors.notifications_for(user=user, unread_only=True, key=key)
    if ids is not None:
        qs = qs.filter(pk__in=ids)
    return qs.update(read=True)


@transaction.atomic
def trust_level_set(*, project, actor: Principal, level: int, reason: str = "") -> ProjectTrust:
    """An owner or admin accepts a level (an offer, a step back, or the opt-in Autonomous)."""
    require(actor, project.organization_id, Perm.ADMIN)
    level = TrustLevel(int(level)).value
    trust = ProjectTrust.objects.select_for_update().filter(project=project).first()
    previous = trust.level if trust else None
    if level not in allowed_levels(previous, project_offer(project)):
        raise Conflict(
            "That level is not on offer: accept the offered level, step back, or opt in to "
            "Autonomous from Confident.",
            details={"field": "level", "allowed": allowed_levels(previous, project_offer(project))},
        )
    if trust is None:
        trust = ProjectTrust(project=project, organization_id=project.organization_id)
    trust.level = level
    trust.save()
    TrustChange.objects.create(
        organization_id=project.organization_id,
        project=project,
        from_level=previous,
        to_level=level,
        reason=_redacted(reason)[:300],
        changed_by=_user(actor),
        changed_by_label=_label(actor),
    )
    audit_record(
        actor=actor,
        action="trust.level_set",
        organization=project.organization,
        metadata={"project": str(project.id), "from": previous, "to": level},
    )
    transaction.on_commit(lambda: publish(project.id, "trust.changed", {"level": level, "from": previous}))
    return trust
