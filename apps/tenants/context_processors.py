"""Template context: the organization and project the page is about, and the viewer's others."""


def tenancy(request):
    return {
        "current_org": getattr(request, "current_org", None),
        "current_project": getattr(request, "current_project", None),
        "principal": getattr(request, "principal", None),
    }
