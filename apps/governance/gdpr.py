"""What the governance app gives to an export and removes in an erasure (see apps/tenants/gdpr.py).

A person's disputes, comments, notifications and trust-level changes are theirs to export. On
erasure their notifications go; disputes and comments stay (the team's review history) with
the author detached and their name replaced by the pseudonym.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Value
from django.db.models.functions import Replace

from apps.governance.models import Dispute, DisputeComment, EntryKind, Notification, TrustChange


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def export_user(user) -> dict[str, Any]:
    return {
        "disputes_opened": [
            {
                "id": str(d.id),
                "memory": str(d.memory_id),
                "reason": d.reason,
                "status": d.status,
                "resolution": d.resolution,
                "at": _iso(d.created_at),
            }
            for d in Dispute.objects.filter(opened_by=user).order_by("created_at")
        ],
        "dispute_comments": [
            {"dispute": str(c.dispute_id), "kind": c.kind, "body": c.body, "at": _iso(c.created_at)}
            for c in DisputeComment.objects.filter(author=user).order_by("created_at")
        ],
        "notifications": [
            {"kind": n.kind, "title": n.title, "body": n.body, "read": n.read, "at": _iso(n.created_at)}
            for n in Notification.objects.filter(user=user).order_by("created_at")
        ],
        "trust_changes": [
            {
                "project": f"{t.project.organization.slug}/{t.project.slug}",
                "from_level": t.from_level,
                "to_level": t.to_level,
                "reason": t.reason,
                "at": _iso(t.created_at),
            }
            for t in TrustChange.objects.filter(changed_by=user)
            .select_related("project__organization")
            .order_by("created_at")
        ],
    }


def export_organization(organization) -> dict[str, Any]:
    return {
        "disputes": [
            {
                "id": str(d.id),
                "project": d.project.slug,
                "memory": str(d.memory_id),
                "opened_by": d.opened_by_label,
                "reason": d.reason,
                "status": d.status,
                "resolution": d.resolution,
                "resolution_note": d.resolution_note,
                "resolved_by": d.resolved_by_label,
                "override": d.override,
                "at": _iso(d.created_at),
                "thread": [
                    {"author": c.author_label, "kind": c.kind, "body": c.body, "at": _iso(c.created_at)}
                    for c in d.comments.all()
                ],
            }
            for d in Dispute.objects.filter(organization=organization)
            .select_related("project")
            .prefetch_related("comments")
            .order_by("created_at")
        ],
    }


def delete_user_data(user, alias: str) -> dict[str, int]:
    notifications, _ = Notification.objects.filter(user=user).delete()
    # Their name (or email) was written into others' notification titles ("Bob disputed a
    # memory…") and into an override's thread entry ("…by Bob overridden."): it goes there too.
    names = {n for n in ((getattr(user, "name", "") or "").strip(), user.email) if n}
    for name in names:
        Notification.objects.filter(title__contains=name).update(
            title=Replace("title", Value(name), Value(alias))
        )
        DisputeComment.objects.filter(kind=EntryKind.OVERRIDDEN, body__contains=name).update(
            body=Replace("body", Value(name), Value(alias))
        )
    rows = Dispute.objects.filter(opened_by=user).update(opened_by=None, opened_by_label=alias)
    rows += Dispute.objects.filter(resolved_by=user).update(resolved_by=None, resolved_by_label=alias)
    rows += DisputeComment.objects.filter(author=user).update(author=None, author_label=alias)
    rows += TrustChange.objects.filter(changed_by=user).update(changed_by=None, changed_by_label=alias)
    return {"notifications": notifications, "dispute_rows": rows}
