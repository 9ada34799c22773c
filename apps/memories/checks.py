"""System checks (`manage.py check`, and before `migrate` and `runserver`): embedding settings a
process could not embed with, caught at start rather than as a 500 on every search."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, register


@register()
def embedding_settings(app_configs, **kwargs) -> list[Error]:
    from apps.memories.embedding.precision import MODELS
    from apps.memories.embedding.providers import LOCAL_RUNTIMES, PROVIDERS

    wanted = [("EMBEDDING_PROVIDER", PROVIDERS, "memories.E001")]
    if settings.EMBEDDING_PROVIDER == "local":  # (the runtime and the precision model are the local model's)
        wanted.append(("EMBEDDING_LOCAL_RUNTIME", LOCAL_RUNTIMES, "memories.E002"))
        wanted.append(("PRECISION_MODEL", MODELS, "memories.E003"))
    return [
        Error(f"{name} is {getattr(settings, name)!r}.", hint=f"Use one of: {', '.join(allowed)}.", id=code)
        for name, allowed, code in wanted
        if getattr(settings, name) not in allowed
    ]
