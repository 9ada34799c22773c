"""`{% load governance %}`: the notifications link with its unread count; a project's trust level."""

from django import template

from apps.governance import selectors, trust

register = template.Library()


@register.inclusion_tag("governance/_notifications_link.html", takes_context=True)
def notifications_link(context) -> dict:
    return selectors.notifications_menu(user=getattr(context.get("request"), "user", None))


@register.simple_tag
def trust_info(project) -> dict:
    """For governance/_trust_badge.html: the project's level, its label and threshold."""
    level = trust.current_level(project)
    return {
        "level": level,
        "label": trust.TrustLevel(level).label if level else "Default",
        "threshold": trust.threshold_for(project),
    }
