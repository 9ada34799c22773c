"""Template context: the organization and project the page is about, and the viewer's others."""

from apps.tenants.roles import Perm


def tenancy(request):
    return {
        "current_org": getattr(request, "current_org", None),
        "current_project": getattr(request, "current_project", None),
        "principal": getattr(request, "principal", None),
        "org_is_owner": _may(request, Perm.ORG_OWN),
        "org_is_admin": _may(request, Perm.ADMIN),  # (what is offered only to those who may use it)
        "org_may_write_memories": _may(request, Perm.MEMORIES_WRITE),  # (teach, import: not for viewers)
    }


def _may(request, perm: Perm) -> bool:
    org, principal = getattr(request, "current_org", None), getattr(request, "principal", None)
    return org is not None and principal is not None and principal.has(org.id, perm)
