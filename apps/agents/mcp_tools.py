"""What each MCP tool does, in the REST API's own terms: the same selectors and services, the
same permission per operation and the same scoping, so a key can do over MCP exactly what it can
do over `/api/v1` — another organization's ids are "not found" here as there.

Plain synchronous Django code: `apps.agents.mcp_server` runs each function in a thread and
turns an `ApiError` into the tool error the model reads.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from apps.graph import selectors as graph_selectors
from apps.memories import selectors as memory_selectors
from apps.memories import services as memory_services
from apps.memories.kinds import TYPE_ALIASES, MemoryKind, normalize_type
from apps.memories.models import FeedbackKind, Memory, MemoryType
from apps.memories.search import NO_HYDE, SearchRequest, search
from apps.memories.search.packing import citation
from apps.memories.validation import MemoryDraft, clean_paths
from apps.observer.injection import build_context
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from apps.tenants.selectors import project_get, projects_for
from apps.tenants.services import require
from memorysaas.kernel.errors import Invalid, NotFound
from memorysaas.kernel.ids import as_uuid

_PICK_A_PROJECT = "Pass `project` (an id or slug from list_projects)."


def project_for(principal: Principal, ref: str | None, permission: str) -> Project:
    """The project a call works on: the one named (by id or slug), else a project-limited
    key's own project, else the organization's only project."""
    if ref and ref.strip():
        as_id = as_uuid(ref.strip())
        if as_id is None:
            slugged = list(projects_for(principal=principal).filter(slug=ref.strip())[:2])
            if len(slugged) != 1:
                raise NotFound(f"No such project: {ref!r}. Call list_projects for the ones you can use.")
            as_id = slugged[0].id
        return project_get(principal=principal, project_id=as_id, permission=permission)
    if principal.project_limit is not None:
        return project_get(principal=principal, project_id=principal.project_limit, permission=permission)
    visible = list(projects_for(principal=principal)[:2])
    if len(visible) == 1:
        return project_get(principal=principal, project_id=visible[0].id, permission=permission)
    if not visible:
        raise NotFound("This key sees no project.")
    raise Invalid(f"This key works on several projects. {_PICK_A_PROJECT}", details={"field": "project"})


def _memory_brief(memory: Memory) -> dict[str, Any]:
    brief = {
        "id": str(memory.id),
        "type": memory.type,
        "content": memory.content,
        "citation": citation(str(memory.id), memory.citation_text),
        "confidence": round(memory.confidence, 3),
        "related_files": list(memory.related_files),
        "user_verified": memory.user_verified,
        "needs_review": memory.needs_review,
        "disputed": memory.disputed,
    }
    if memory.payload:
        brief["payload"] = memory.payload
    return brief


def _types(values: list[str]) -> list[str] | None:
    try:
        return [normalize_type(v) for v in values] or None
    except ValueError:
        raise Invalid(
            f"Unknown memory type among {values!r}; use one of: {', '.join([*MemoryKind, *TYPE_ALIASES])}.",
            details={"field": "types"},
        ) from None


def _memory_id(value: str):
    as_id = as_uuid(value.strip())
    if as_id is None:
        raise Invalid(
            f"{value!r} is not a memory id (ids look like 3f2b…-…, a UUID).", details={"field": "memory_id"}
        )
    return as_id


# ---------------------------------------------------------------- projects


def list_projects(*, principal: Principal) -> dict[str, Any]:
    projects = projects_for(principal=principal)
    return {
        "project_limited": principal.project_limit is not None,
        "projects": [
            {
                "id": str(p.id),
                "slug": p.slug,
                "name": p.name,
                "organization": p.organization.slug,
                "team": p.team.slug if p.team_id else None,
            }
            for p in projects
        ],
    }


# ---------------------------------------------------------------- memories


def search_memory(
    *,
    principal: Principal,
    project: str | None,
    query: str,
    files: list[str],
    types: list[str],
    phase: str | None,
    limit: int,
) -> dict[str, Any]:
    target = project_for(principal, project, Perm.MEMORIES_READ)
    result = search(
        SearchRequest(
            principal=principal,
            project=target,
            query=query,
            files=files,
            phase=phase,
            limit=limit,
            types=_types(types),
        )
    )
    return {
        "project": target.slug,
        "query_kind": result.query_kind,
        "results": [
            {"rank": hit.rank, "score": round(hit.score, 4), "stale": hit.stale, **_memory_brief(hit.memory)}
            for hit in result.hits
        ],
    }


def get_context(
    *,
    principal: Principal,
    project: str | None,
    task: str,
    files: list[str],
    phase: str | None,
    session_id: str,
    token_budget: int | None,
) -> dict[str, Any]:
    if not task.strip() and not clean_paths(files):
        raise Invalid("Send a task, files, or both.", details={"field": "task"})
    target = project_for(principal, project, Perm.MEMORIES_READ)
    packed = build_context(
        principal=principal,
        project=target,
        phase=phase,
        task=task,
        files=files,
        session_id=session_id,
        token_budget=token_budget,
    )
    return {
        "project": target.slug,
        "phase": packed["phase"],
        "text": packed["text"],
        "token_count": packed["token_count"],
        "token_budget": packed["token_budget"],
        "memories": [
            {"id": m["id"], "type": m["type"], "citation": m["citation"]} for m in packed["memories"]
        ],
        "control_group": packed.get("control_group", False),
    }


def remember(
    *,
    principal: Principal,
    project: str | None,
    content: str,
    type: str,
    related_files: list[str],
    tags: list[str],
    payload: dict[str, Any] | None,
    session_id: str,
) -> dict[str, Any]:
    target = project_for(principal, project, Perm.MEMORIES_WRITE)
    try:
        draft = MemoryDraft.model_validate(
            {
                "content": content,
                "type": type,
                "related_files": related_files,
                "tags": tags,
                "payload": payload or {},
                "session_id": session_id,
            }
        )
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'memory'}: {e['msg']}" for e in exc.errors()
        )
        raise Invalid(f"The memory is not valid: {problems}") from None
    memory = memory_services.memory_create(project=target, actor=principal, draft=draft)
    return {"project": target.slug, "stored": True, **_memory_brief(memory)}


def memory_feedback(
    *, principal: Principal, memory_id: str, kind: str, content: str | None, note: str, session_id: str
) -> dict[str, Any]:
    memory = memory_selectors.memory_get(principal=principal, memory_id=_memory_id(memory_id))
    require(principal, memory.organization_id, Perm.MEMORIES_WRITE)
    if kind == FeedbackKind.CORRECT and not (content and content.strip()):
        raise Invalid("A correction needs the corrected text in `content`.", details={"field": "content"})
    memory = memory_services.memory_feedback(
        memory=memory, actor=principal, kind=kind, content=content, note=note, session_id=session_id
    )
    return {"feedback": kind, **_memory_brief(memory)}


def recipes(*, principal: Principal, project: str | None, task: str, limit: int) -> dict[str, Any]:
    target = project_for(principal, project, Perm.MEMORIES_READ)
    if task.strip():
        found = search(
            SearchRequest(
                principal=principal,
                project=target,
                query=task,
                limit=limit,
                types=[MemoryType.WORKFLOW_RECIPE],
                include_stale=False,
            ),
            NO_HYDE,
        )
        memories = [hit.memory for hit in found.hits]
    else:
        memories, _ = memory_selectors.memories_list(
            principal=principal, project=target, type=MemoryType.WORKFLOW_RECIPE, limit=limit
        )
    return {"project": target.slug, "recipes": [_memory_brief(m) for m in memories]}


# ---------------------------------------------------------------- graph


def impact(*, principal: Principal, project: str | None, target: str, depth: int) -> dict[str, Any]:
    found = project_for(principal, project, Perm.MEMORIES_READ)
    return {"project": found.slug, **graph_selectors.impact(project=found, target=target, depth=depth)}


def dependencies(*, principal: Principal, project: str | None, file: str, depth: int) -> dict[str, Any]:
    found = project_for(principal, project, Perm.MEMORIES_READ)
    return {"project": found.slug, **graph_selectors.dependencies(project=found, file=file, depth=depth)}
