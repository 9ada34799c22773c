"""What callers hand memories, validated before anything touches the database: `MemoryDraft`
(what `services.memory_create` takes), `MemoryChanges` (the fields a change may set), and the
rules for the file paths an agent sends (relative to its repository's root).

The API's input schema, the observer's promotion pipeline, sync and imports all build drafts,
so the rules live in one place: the type is one of the 16 memory types or a Dex alias, content
is 1–4000 characters, confidence in [0, 1], the payload matches its type's schema, lists are
bounded.
"""

from __future__ import annotations

import re
from typing import Any
from uuid import UUID

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from apps.memories.kinds import TYPE_NAMES, RelationKind, Scope, Source, normalize_type
from apps.memories.payloads import PAYLOAD_SCHEMAS, PayloadError, validate_payload
from memorysaas.kernel.jsontypes import JsonTyped
from memorysaas.kernel.openapi import NOT_SPACE, inline_refs, stripped_text_schema
from memorysaas.kernel.schemas import InputSchema, refuse_unstorable

MAX_CONTENT_CHARS = 4000
# A century: longer is "never decays" in all but name (leave it unset, or pin), and three of it
# still lands inside PostgreSQL's timestamp range when the daily job looks back that far.
MAX_HALF_LIFE_DAYS = 36_500
MAX_CITATION_CHARS = 40
MAX_LINE = 2**31 - 1  # (an integer column)
MAX_BATCH = 500


_WINDOWS_ROOT = re.compile(r"^(?:[A-Za-z]:|//)")


def clean_root(root: str) -> str:
    """A repository's root on an agent's machine as paths under it are matched: forward
    slashes, no trailing one ("" for none, or for `/` alone, which would match every path)."""
    return root.strip().replace("\\", "/").rstrip("/")


def from_root(path: str, root: str) -> str:
    """`path` relative to `root` (a `clean_root`) when it lies under it, else as it is: agents
    send the absolute paths their tools use (`/home/me/shop/orders/models.py`)."""
    if root and isinstance(path, str):
        # Windows paths (a drive letter, or //server/share) separate with either slash and name
        # the same file in any case; elsewhere a backslash is part of the name or an escape (a
        # Glob's `\[draft\].md`) and stays.
        windows = bool(_WINDOWS_ROOT.match(root))
        slashed = path.strip().replace("\\", "/") if windows else path.strip()
        prefix = root + "/"
        key = str.casefold if windows else str
        if key(slashed).startswith(key(prefix)):
            return slashed[len(prefix) :]
    return path


def clean_paths(paths: list[str], root: str = "") -> list[str]:
    """Repository-relative paths, stripped of `./` (and of `root`, a `clean_root`, where they lie
    under it), without duplicates, order kept."""
    seen: dict[str, None] = {}
    for raw in paths:
        path = from_root(raw, root).strip().replace("\\", "/")
        while path.startswith("./"):
            path = path[2:]
        if path.strip("/"):  # (`/` alone names no file)
            seen.setdefault(path, None)
    return list(seen)


class WorkUnitRef(JsonTyped):
    model_config = ConfigDict(extra="forbid")

    methodology: str = Field("native", max_length=40)
    hierarchy: list[str] = Field(default_factory=list, max_length=10)
    label: str = Field("", max_length=200)


def _relation_schema(schema: dict[str, Any]) -> None:
    """A relation names a memory or a file (`has_target`)."""
    schema["anyOf"] = [
        {"required": ["target_memory_id"], "properties": {"target_memory_id": {"type": "string"}}},
        {"required": ["target_file_path"], "properties": {"target_file_path": {"pattern": NOT_SPACE}}},
    ]


class RelationDraft(JsonTyped):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_relation_schema)

    relation_type: RelationKind
    target_memory_id: UUID | None = None
    target_file_path: str = Field("", max_length=500)
    confidence: float = Field(1.0, ge=0, le=1)
    auto_extracted: bool = False

    @model_validator(mode="after")
    def has_target(self) -> RelationDraft:
        if self.target_memory_id is None and not self.target_file_path.strip():
            raise ValueError("a relation needs target_memory_id or target_file_path")
        return self


# The longest entry each list column holds (apps.memories.models.Memory).
_ENTRY_LIMITS = {"tags": 100, "provenance_session_ids": 100, "related_modules": 300, "impacted_node_ids": 300}
_PATH_LIMIT = 500


def _payload_schemas() -> list[dict[str, Any]]:
    """For each type with a payload schema: a payload of that type is empty or fits it."""
    return [
        {
            "if": {"required": ["type"], "properties": {"type": {"const": memory_type}}},
            "then": {
                "properties": {
                    "payload": {"anyOf": [{"maxProperties": 0}, inline_refs(model.model_json_schema())]}
                }
            },
        }
        for memory_type, model in PAYLOAD_SCHEMAS.items()
    ]


def _draft_schema(schema: dict[str, Any]) -> None:
    """What the validators below check, in the schema: the type's names, the payload of each
    type, the entries' lengths."""
    stripped_text_schema(schema)
    properties = schema["properties"]
    properties["type"]["enum"] = list(TYPE_NAMES)
    for name, limit in {**_ENTRY_LIMITS, "related_files": _PATH_LIMIT}.items():
        properties[name]["items"]["maxLength"] = limit
    schema["allOf"] = _payload_schemas()


class MemoryDraft(JsonTyped):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, json_schema_extra=_draft_schema)

    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    type: str = Field(description="One of the 16 memory types, or a Dex alias (pitfall, fix, …).")
    source: Source = Source.AGENT_EXPLICIT
    scope: Scope = Scope.PROJECT
    confidence: float = Field(0.8, ge=0, le=1)
    tags: list[str] = Field(default_factory=list, max_length=30)
    related_files: list[str] = Field(default_factory=list, max_length=100)
    related_modules: list[str] = Field(default_factory=list, max_length=50)
    payload: dict[str, Any] = Field(default_factory=dict)
    citation_text: str = Field("", max_length=MAX_CITATION_CHARS)
    session_id: str = Field("", max_length=100)
    provenance_session_ids: list[str] = Field(default_factory=list, max_length=200)
    needs_review: bool = False
    user_verified: bool = False
    pinned: bool = False
    work_unit_ref: WorkUnitRef | None = None
    methodology: str = Field("", max_length=40)
    commit_sha: str = Field("", max_length=64)
    decay_half_life_days: float | None = Field(None, gt=0, le=MAX_HALF_LIFE_DAYS)
    chunk_type: str = Field("", pattern=r"^(|function|class|module|prose)$")
    chunk_start_line: int | None = Field(None, ge=1, le=MAX_LINE)
    chunk_end_line: int | None = Field(None, ge=1, le=MAX_LINE)
    context_prefix: str = Field("", max_length=500)
    target_node_id: str = Field("", max_length=300)
    impacted_node_ids: list[str] = Field(default_factory=list, max_length=200)
    relations: list[RelationDraft] = Field(default_factory=list, max_length=50)

    @model_validator(mode="before")
    @classmethod
    def storable(cls, data: Any) -> Any:
        refuse_unstorable(data)  # (every writer, not only the API, builds a draft)
        return data

    @field_validator("type")
    @classmethod
    def known_type(cls, value: str) -> str:
        try:
            return normalize_type(value)
        except ValueError:
            raise ValueError(f"unknown memory type {value!r}") from None

    @field_validator("tags", "related_modules", "provenance_session_ids", "impacted_node_ids")
    @classmethod
    def bounded_strings(cls, values: list[str], info: ValidationInfo) -> list[str]:
        cleaned = list(dict.fromkeys(v.strip() for v in values if v and v.strip()))
        limit = _ENTRY_LIMITS[info.field_name]
        if any(len(v) > limit for v in cleaned):
            raise ValueError(f"each entry is at most {limit} characters")
        return cleaned

    @field_validator("related_files")
    @classmethod
    def paths(cls, values: list[str]) -> list[str]:
        cleaned = clean_paths(values)
        if any(len(v) > _PATH_LIMIT for v in cleaned):
            raise ValueError(f"each path is at most {_PATH_LIMIT} characters")
        return cleaned

    @field_validator("payload")
    @classmethod
    def payload_matches_type(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        memory_type = info.data.get("type")
        if memory_type is None:  # (the type itself was wrong: that error says enough)
            return value
        try:
            return validate_payload(memory_type, value)
        except PayloadError as exc:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or 'payload'}: {error['msg']}"
                for error in exc.errors
            )
            raise ValueError(f"does not fit type {memory_type}: {problems}") from None

    @model_validator(mode="after")
    def lines_in_order(self) -> MemoryDraft:
        """A chunk's lines given backwards are the same range (a schema cannot compare two fields,
        so a request it admits is not refused for the order)."""
        start, end = self.chunk_start_line, self.chunk_end_line
        if start is not None and end is not None and end < start:
            self.chunk_start_line, self.chunk_end_line = end, start
        return self


def short_citation(content: str) -> str:
    text = " ".join(content.split())
    if len(text) <= MAX_CITATION_CHARS:
        return text
    cut = text[: MAX_CITATION_CHARS - 1].rsplit(" ", 1)[0]
    return f"{cut}…"


class MemoryChanges(InputSchema):
    """The fields of a memory a change may set, each optional: what a device's offline edit
    carries (sync) and the core of the API's PATCH, which adds the fields only the API changes
    and holds the content to its limits."""

    content: str | None = None
    type: str | None = None
    tags: list[str] | None = None
    related_files: list[str] | None = None
    related_modules: list[str] | None = None
    payload: dict[str, Any] | None = None
    citation_text: str | None = None
    confidence: float | None = Field(None, ge=0, le=1)
    pinned: bool | None = None
    deprecated: bool | None = None
