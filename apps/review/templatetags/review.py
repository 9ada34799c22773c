"""`{% load review %}`: what the signed-in person may do to a memory, and how a memory's
confidence, author and age read on a card."""

import re

from django import template
from django.template.defaultfilters import linebreaksbr
from django.utils import timezone
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince

from apps.memories.models import MemoryScope
from apps.memories.selectors import is_author
from apps.tenants.dashboard import visible_project_ids
from apps.tenants.roles import Perm

register = template.Library()


@register.simple_tag(takes_context=True)
def memory_actions(context, memory) -> dict[str, bool]:
    """write: confirm, correct, flag; review: pin; delete: the author, or a reviewer; home: the
    reader may open the memory's home project (a memory shared to the org may come from a team's
    project they cannot), so it is named; dispute: writers, where the home project takes it."""
    request = context.get("request")
    principal = getattr(request, "principal", None)
    if principal is None:
        return {"write": False, "review": False, "delete": False, "home": False, "dispute": False}
    org_id = memory.organization_id
    write = principal.has(org_id, Perm.MEMORIES_WRITE)
    review = principal.has(org_id, Perm.MEMORIES_REVIEW)
    here = context.get("project")
    home = memory.project_id == getattr(here, "id", None) or memory.project_id in visible_project_ids(request)
    return {
        "write": write,
        "review": review,
        "delete": review or (write and is_author(principal=principal, memory=memory)),
        "home": home,
        "dispute": write and home and memory.scope != MemoryScope.PERSONAL,
    }


@register.filter
def confidence_dots(value: float) -> str:
    filled = max(0, min(5, round((value or 0) * 5)))
    return "●" * filled + "○" * (5 - filled)


@register.filter
def created_by(memory) -> str:
    """Who stored it: a person, a person's API key, or the observer."""
    person = memory.owner.display_name if memory.owner_id and memory.owner else ""
    key = memory.created_by_key.name if memory.created_by_key_id and memory.created_by_key else ""
    if person and key:
        return f"{person} (key “{key}”)"
    if person or key:
        return person or f"key “{key}”"
    return "the observer" if memory.source == "observer_inferred" else "system"


@register.filter
def percent(value: float | None) -> str:
    return "—" if value is None else f"{round(value * 100)}%"


@register.filter
def short_session(session_id: str) -> str:
    return session_id if len(session_id) <= 14 else f"{session_id[:12]}…"


@register.filter
def spaced(value: str) -> str:
    """`feedback_confirm` → `feedback confirm`."""
    return str(value or "").replace("_", " ")


@register.filter
def thousands(value: int) -> str:
    """12345 → 12,345."""
    return f"{int(value or 0):,}"


@register.filter
def ago(moment) -> str:
    """“just now”, “5 minutes ago”, “3 days ago”."""
    if not moment:
        return "never"
    if (timezone.now() - moment).total_seconds() < 60:
        return "just now"
    return f"{timesince(moment).split(',')[0]} ago"


@register.filter
def lasted(start, end) -> str:
    """How long from `start` to `end`: “under a minute”, “5 minutes”, “2 hours”."""
    if not start or not end:
        return ""
    if (end - start).total_seconds() < 60:
        return "under a minute"
    return timesince(start, end).split(",")[0]


_INLINE_CODE = re.compile(r"`([^`\n]+)`")


@register.filter(needs_autoescape=True)
def prose(text, autoescape=True) -> str:
    """A memory's text as a page shows it: escaped, line breaks kept, `code` in code type (the
    observer and agents write paths and names between backticks, as Markdown does)."""
    escaped = conditional_escape(text or "") if autoescape else str(text or "")
    html = _INLINE_CODE.sub(r"<code>\1</code>", str(escaped))
    return mark_safe(linebreaksbr(html, autoescape=False))
