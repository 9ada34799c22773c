"""`{% load governance %}`: the notifications link with its unread count; a project's trust level."""

from django import template

from apps.governance import selectors, trust

register = template.Library()


def notifications_menu(user) -> dict:
    """The unread count and the five newest unread notifications of `user`."""
    unread = selectors.notifications_for(user=user, unread_only=True) if user else None
    recent = list(unread[:5]) if unread is not None else []
    return {"unread": unread.count() if unread is not None else 0, "recent": recent}


@register.inclusion_tag("governance/_notifications_link.html", takes_context=True)
def notifications_link(context) -> dict:
    return notifications_menu(getattr(context.get("request"), "user", None))


@register.simple_tag
def trust_info(project) -> dict:
    """For governance/_trust_badge.html: the project's level, its label and threshold."""
    level = trust.current_level(project)
    return {
        "level": level,
        "label": trust.TrustLevel(level).label if level else "Default",
        "threshold": trust.threshold_for(project),
    }
