"""Fitting redacted text back into its field: a secret's placeholder can be longer than what it
replaced, so a value redaction lengthened is trimmed to the column (or the draft's limit)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import models

from apps.memories import secrets_scan
from apps.memories.models import (
    Memory,
    MemoryRelation,
)
from apps.memories.validation import (
    MAX_CONTENT_CHARS,
)


def _redacted_fields(
    fields: dict[str, Any],
    found: secrets_scan.Findings | None = None,
    *,
    model: type[models.Model] = Memory,
    known: Iterable[str] = (),
) -> tuple[dict[str, Any], list[str]]:
    """The fields with their secrets redacted, each cut to its column in `model` if the marker
    made it longer than the column holds, and the kinds found. `found`: the detect-secrets hits
    over these fields (and maybe others), computed once for a whole batch; computed here when
    not given. `known`: the kinds the memory already records (see `secrets_scan.redact`)."""
    kinds: set[str] = set()
    known = frozenset(known)
    if found is None:
        found = secrets_scan.plugin_findings(list(secrets_scan.strings(list(fields.values()))))
    clean = {}
    for name, value in fields.items():
        value = secrets_scan.redact(value, found, kinds, known)
        limit = _column_length(model, name)
        clean[name] = _fit(value, limit) if limit else value
    return clean, sorted(kinds)


# Draft keys that are not a column of the memory itself: the column their values go to.
_COLUMN_OF = {"relation_paths": (MemoryRelation, "target_file_path")}


# Text columns without a length whose drafts have one: a marker must not push a stored memory
# past what any later edit (validated as a whole draft) accepts.
_DRAFT_LIMITS = {(Memory, "content"): MAX_CONTENT_CHARS}


def _column_length(model: type[models.Model], name: str) -> int | None:
    """The longest string the column `name` (or each entry of that array column) holds."""
    if (model, name) in _DRAFT_LIMITS:
        return _DRAFT_LIMITS[model, name]
    model, name = _COLUMN_OF.get(name, (model, name))
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        return None
    return getattr(getattr(field, "base_field", field), "max_length", None)


def _fit(value: Any, limit: int) -> Any:
    """A redacted value cut to its column: `[REDACTED:<kind>]` can be longer than what it
    replaced. Values without a marker are left for validation to judge."""
    if isinstance(value, str) and len(value) > limit and "[REDACTED:" in value:
        return value[: limit - 1] + "…"
    if isinstance(value, list):
        return [_fit(v, limit) for v in value]
    return value
