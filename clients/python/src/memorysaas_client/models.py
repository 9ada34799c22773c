"""What the service answers, as typed values. Each model keeps the fields it does not declare
(`extra="allow"`): the API's shapes may grow, and an older client must still read them."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field


class Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class Organization(Model):
    id: UUID
    slug: str
    name: str


class Project(Model):
    id: UUID
    slug: str
    name: str
    organization: Organization


class Me(Model):
    kind: str
    email: str | None = None
    api_key_prefix: str | None = None
    project_limit: UUID | None = None
    organizations: list[dict[str, Any]] = Field(default_factory=list)


class Memory(Model):
    id: UUID
    type: str
    content: str
    confidence: float = 0.0
    tags: list[str] = Field(default_factory=list)
    related_files: list[str] = Field(default_factory=list)
    payload: dict[str, Any] = Field(default_factory=dict)
    citation: str = ""
    source: str = ""
    needs_review: bool = False
    disputed: bool = False
    deprecated: bool = False
    version: int = 0


class MemoryPage(Model):
    items: list[Memory]
    next_cursor: str | None = None


class SearchHit(Model):
    rank: int
    memory: Memory
    stale: bool = False
    citation: str = ""


class SearchResult(Model):
    query: str
    query_kind: str = ""
    results: list[SearchHit] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)


class ContextMemory(Model):
    id: str
    type: str
    citation: str = ""


class Context(Model):
    phase: str
    text: str
    token_count: int = 0
    token_budget: int = 0
    memories: list[ContextMemory] = Field(default_factory=list)
    control_group: bool = False


class Session(Model):
    id: UUID
    status: str = ""
    ab_group: str = ""
    task: str = ""
    event_count: int = 0
    start_context: Any = None


class EventsAccepted(Model):
    accepted: int
    duplicates: int = 0
    event_count: int = 0


class StepInjection(Model):
    step: int
    injection: Any = None


class IndexJob(Model):
    id: int | None = None
    kind: str | None = None
    status: str
    progress: int = 0
    files: int = 0
    nodes: int = 0
    edges: int = 0
    skipped: int = 0
    error: str | None = None


class DeviceCode(Model):
    """RFC 8628 §3.2: what the device shows its user, and the code it polls with."""

    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str = ""
    expires_in: int
    interval: int = 5


class DeviceToken(Model):
    """The device's own API key, once a person approved the login (RFC 8628 §3.5)."""

    access_token: str
    token_type: str = "Bearer"
    scope: str = ""
    device_id: UUID
    organization: Organization
    project: Project | None = None
