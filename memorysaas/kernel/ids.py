"""Ids as the API receives them: any string a caller sends may be meant as a UUID."""

from __future__ import annotations

from uuid import UUID


def as_uuid(value: str | UUID) -> UUID | None:
    """`value` as a UUID, or None when it is not one (so a malformed id finds nothing, as a
    missing one does, instead of raising)."""
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        return None
