"""`memorysaas mcp`: a stdio MCP server with the remote `/mcp` server's tools (same names, same
arguments), each forwarded to the REST API with the login's key.

When the service cannot be reached, what the device holds answers instead: `search_memory`,
`recipes` and `get_context` search the offline replica (kept by `memorysaas sync`) and say so,
and `remember` queues the memory in the replica for the next sync. The other tools need the
service and say that it is away.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from memorysaas_client import tool_specs
from memorysaas_client.config import Profile
from memorysaas_client.errors import ApiError, Unreachable
from memorysaas_client.kinds import normalize_type
from memorysaas_client.models import Memory
from memorysaas_client.replica import InvalidChange, Replica
from memorysaas_client.sdk import Client

INSTRUCTIONS = (
    tool_specs.INSTRUCTIONS
    + """
This server runs on your machine: when the service is unreachable, searches answer from the
device's offline copy and new memories wait there for the next sync."""
)
# What each tool does on this server when the service is away (after its shared description).
OFFLINE_NOTES = {
    "search_memory": "Offline, the device's copy answers.",
    "get_context": "Offline, the device's copy answers.",
    "recipes": "Offline, the device's copy answers.",
    "remember": "Offline, it waits on the device for the next sync.",
}
_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
T = TypeVar("T")


def brief(memory: Memory | dict[str, Any]) -> dict[str, Any]:
    """What a tool shows of a memory, from the API's copy or the replica's."""
    data = memory.model_dump(mode="json") if isinstance(memory, Memory) else dict(memory)
    shown = {
        "id": str(data["id"]),
        "type": data["type"],
        "content": data["content"],
        "citation": data.get("citation") or f"[Memory #{str(data['id'])[:8]}]",
        "confidence": round(float(data.get("confidence") or 0.0), 3),
        "related_files": list(data.get("related_files") or []),
    }
    if data.get("payload"):
        shown["payload"] = data["payload"]
    return shown


class Backend:
    """The service through the SDK, and the replica beside it for when the service is away."""

    def __init__(self, profile: Profile, api: Client | None = None) -> None:
        self.profile = profile
        self.api = api or Client(profile.url, profile.key)
        self._replica: Replica | None = None

    def replica(self) -> Replica:
        if not self.profile.project_id:
            raise ToolError(
                "The service is unreachable and no project is logged in: nothing to search offline."
            )
        if self._replica is None:
            path = self.profile.replica_path()
            path.parent.mkdir(parents=True, exist_ok=True)
            self._replica = Replica(str(path), project_id=self.profile.project_id)
        return self._replica

    def project(self, ref: str | None) -> str:
        """The project id a call works on: the one named (id or slug), else the login's."""
        ref = (ref or "").strip()
        if not ref:
            if self.profile.project_id:
                return self.profile.project_id
            projects = self.api.projects()
            if len(projects) == 1:
                return str(projects[0].id)
            raise ToolError("Pass `project` (an id or slug from list_projects).")
        if _UUID.match(ref):
            return ref
        matches = [p for p in self.api.projects() if p.slug == ref]
        if len(matches) != 1:
            raise ToolError(f"No such project: {ref!r}. Call list_projects for the ones you can use.")
        return str(matches[0].id)

    def offline_search(self, query: str, *, types: list[str], limit: int) -> list[dict[str, Any]]:
        return [brief(memory) for memory in self.replica().find(query, limit, types=types)]


def _types(values: list[str]) -> list[str]:
    try:
        return [normalize_type(v) for v in values]
    except ValueError:
        raise ToolError(f"Unknown memory type among {values!r}.") from None


async def _call(work: Callable[[], T]) -> T:
    """Run a blocking SDK call off the event loop; an API error becomes the tool error the model
    reads."""
    try:
        return await anyio.to_thread.run_sync(work)
    except ApiError as error:
        raise ToolError(error.message) from None
    except InvalidChange as error:
        raise ToolError(str(error)) from None


def build_server(backend: Backend) -> MCPServer:
    """The stdio server: the service's tools (tool_specs), answered through the SDK, and from the
    replica where the service is away."""
    server = MCPServer(name="memorysaas", instructions=INSTRUCTIONS)

    async def list_projects() -> dict[str, Any]:
        def work() -> dict[str, Any]:
            projects = backend.api.projects()
            return {
                "projects": [
                    {"id": str(p.id), "slug": p.slug, "name": p.name, "organization": p.organization.slug}
                    for p in projects
                ]
            }

        return await _call(_online(work))

    async def search_memory(
        *, query: str, project: str | None, files: list[str], types: list[str], phase: str | None, limit: int
    ) -> dict[str, Any]:
        wanted = _types(types)

        def online() -> dict[str, Any]:
            found = backend.api.search(
                backend.project(project), query, files=files, types=wanted or None, phase=phase, limit=limit
            )
            return {
                "query_kind": found.query_kind,
                "results": [{"rank": h.rank, "stale": h.stale, **brief(h.memory)} for h in found.results],
            }

        def offline() -> dict[str, Any]:
            return {"offline": True, "results": backend.offline_search(query, types=wanted, limit=limit)}

        return await _call(_with_fallback(online, offline))

    async def get_context(
        *,
        task: str,
        files: list[str],
        project: str | None,
        phase: str | None,
        session_id: str,
        token_budget: int | None,
    ) -> dict[str, Any]:
        if not task.strip() and not any(f.strip() for f in files):
            raise ToolError("Send a task, files, or both.")

        def online() -> dict[str, Any]:
            packed = backend.api.context(
                backend.project(project),
                task=task,
                files=files,
                phase=phase,
                token_budget=token_budget,
                session_id=session_id,
            )
            return {
                "phase": packed.phase,
                "text": packed.text,
                "token_count": packed.token_count,
                "memories": [m.model_dump(mode="json") for m in packed.memories],
            }

        def offline() -> dict[str, Any]:
            found = backend.offline_search(" ".join([task, *files]), types=[], limit=8)
            text = "\n".join(f"{m['citation']} ({m['type']}) {m['content']}" for m in found)
            return {"offline": True, "text": text, "memories": found}

        return await _call(_with_fallback(online, offline))

    async def remember(
        *,
        content: str,
        type: str,
        related_files: list[str],
        tags: list[str],
        project: str | None,
        payload: dict[str, Any] | None,
        session_id: str,
    ) -> dict[str, Any]:
        def online() -> dict[str, Any]:
            extra = {"session_id": session_id} if session_id else {}
            memory = backend.api.memories.create(
                backend.project(project),
                type=type,
                content=content,
                tags=tags,
                related_files=related_files,
                payload=payload,
                **extra,
            )
            return {"stored": True, **brief(memory)}

        def offline() -> dict[str, Any]:
            local_id = backend.replica().remember(
                type=type, content=content, tags=tags, related_files=related_files
            )
            return {"stored": False, "queued": True, "id": local_id, "note": "queued for the next sync"}

        return await _call(_with_fallback(online, offline))

    async def memory_feedback(
        *, memory_id: str, kind: str, content: str | None, note: str, session_id: str
    ) -> dict[str, Any]:
        if not _UUID.match(memory_id.strip()):
            raise ToolError(f"{memory_id!r} is not a memory id (ids look like 3f2b…-…, a UUID).")
        if kind == "correct" and not (content and content.strip()):
            raise ToolError("A correction needs the corrected text in `content`.")

        def work() -> dict[str, Any]:
            memory = backend.api.memories.feedback(
                memory_id.strip(), kind, content=content, note=note, session_id=session_id
            )
            return {"feedback": kind, **brief(memory)}

        return await _call(_online(work))

    async def recipes(*, task: str, project: str | None, limit: int) -> dict[str, Any]:
        def online() -> dict[str, Any]:
            target = backend.project(project)
            if task.strip():
                hits = backend.api.search(target, task, types=["workflow_recipe"], limit=limit).results
                return {"recipes": [brief(h.memory) for h in hits]}
            page = backend.api.memories.list(target, type="workflow_recipe", limit=limit)
            return {"recipes": [brief(m) for m in page.items]}

        def offline() -> dict[str, Any]:
            found = backend.offline_search(task or "recipe", types=["workflow_recipe"], limit=limit)
            return {"offline": True, "recipes": found}

        return await _call(_with_fallback(online, offline))

    async def impact(*, target: str, project: str | None, depth: int) -> dict[str, Any]:
        return await _call(
            _online(lambda: backend.api.graph.impact(backend.project(project), target, depth=depth))
        )

    async def dependencies(*, file: str, project: str | None, depth: int) -> dict[str, Any]:
        return await _call(
            _online(lambda: backend.api.graph.dependencies(backend.project(project), file, depth=depth))
        )

    handlers = {
        "list_projects": list_projects,
        "search_memory": search_memory,
        "get_context": get_context,
        "remember": remember,
        "memory_feedback": memory_feedback,
        "recipes": recipes,
        "impact": impact,
        "dependencies": dependencies,
    }
    for spec in tool_specs.TOOLS:
        tool_specs.register(server, spec, handlers[spec.__name__], note=OFFLINE_NOTES.get(spec.__name__, ""))
    return server


def _online(work: Callable[[], T]) -> Callable[[], T]:
    def run() -> T:
        try:
            return work()
        except Unreachable:
            raise ToolError(
                "The memorysaas service is unreachable; this tool needs it. Try again later."
            ) from None

    return run


def _with_fallback(online: Callable[[], T], offline: Callable[[], T]) -> Callable[[], T]:
    def run() -> T:
        try:
            return online()
        except Unreachable:
            return offline()

    return run
