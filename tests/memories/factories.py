"""Builders for memories in tests: drafts with sensible defaults, stored through the services."""

from __future__ import annotations

from typing import Any

from apps.memories import services
from apps.memories.models import Memory
from apps.memories.validation import MemoryDraft
from apps.tenants.principal import Principal


def draft(**fields: Any) -> MemoryDraft:
    values: dict[str, Any] = {"content": "Use select_for_update() only inside atomic().", "type": "gotcha"}
    values.update(fields)
    return MemoryDraft(**values)


def make_memory(person, *, project=None, principal: Principal | None = None, **fields: Any) -> Memory:
    return services.memory_create(
        project=project or person.project,
        actor=principal or person.principal,
        draft=draft(**fields),
    )
