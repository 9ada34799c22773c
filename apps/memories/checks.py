"""System checks (`manage.py check`, and before `migrate` and `runserver`): embedding settings a
process could not embed with, caught at start rather than as a 500 on every search."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, register


@register()
def embedding_settings(app_configs, **kwargs) -> list[Error]:
    from apps.memories.embeddings import LOCAL_RUNTIMES, PROVIDERS

    errors = []
    if settings.EMBEDDING_PROVIDER not in PROVIDERS:
        errors.append(
            Error(
                f"EMBEDDING_PROVIDER is {settings.EMBEDDING_PROVIDER!r}.",
                hint=f"Use one of: {', '.join(PROVIDERS)}.",
                id="memories.E001",
            )
        )
    if settings.EMBEDDING_LOCAL_RUNTIME not in LOCAL_RUNTIMES:
        errors.append(
            Error(
                f"EMBEDDING_LOCAL_RUNTIME is {settings.EMBEDDING_LOCAL_RUNTIME!r}.",
                hint=f"Use one of: {', '.join(LOCAL_RUNTIMES)}.",
                id="memories.E002",
            )
        )
    return errors
