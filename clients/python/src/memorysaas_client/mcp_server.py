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
from typing import Annotated, Any, Literal, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from memorysaas_client.config import Profile
from memorysaas_client.errors import ApiError, Unreachable
from memorysaas_client.kinds import normalize_type
from memorysaas_client.models import Memory
from memorysaas_client.replica import InvalidChange, Replica
from memorysaas_client.sdk import Client

INSTRUCTIONS = """\
memorysaas is your team's shared memory of this codebase: gotchas, decisions, error patterns,
dead ends and workflow recipes that earlier agent sessions and people recorded, plus a code graph.
- Before working on a task, call get_context with the task and the files in play.
- To look something up (an error message, an identifier, "why is X done this way"), call search_memory.
- Before changing a file, impact tells you what depends on it; dependencies what it depends on.
- When you learn something a later session should know, call remember.
- When a memory helped, was wrong or is out of date, call memory_feedback with its id.
This server runs on your machine: when the service is unreachable, searches answer from the
device's offline copy and new memories wait there for the next sync."""

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
_UUID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
MAX_CONTENT_CHARS = 4000

ProjectArg = Annotated[
    str | None,
    Field(description="Project id or slug (see list_projects). Leave out to use the logged-in project."),
]
FilesArg = Annotated[
    list[Annotated[str, Field(max_length=500)]],
    Field(description="Repository-relative paths of the files in play.", max_length=100),
]
PhaseArg = Annotated[
    str | None,
    Field(max_length=40, description="Work phase: define, implement, validate, refine, explore or reflect."),
]
SessionArg = Annotated[str, Field(max_length=100, description="An observer session id, if any.")]
RememberType = Literal[
    "gotcha", "decision", "preference", "pattern", "requirement", "error_pattern", "module_insight",
    "dead_end", "workflow_recipe", "causal_dependency", "e2e_observation", "work_state",
]  # fmt: skip
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
    server = MCPServer(name="memorysaas", instructions=INSTRUCTIONS)

    @server.tool(annotations=READ_ONLY)
    async def list_projects() -> dict[str, Any]:
        """List the projects this login can work on (id, slug, name, organization)."""

        def work() -> dict[str, Any]:
            projects = backend.api.projects()
            return {
                "projects": [
                    {"id": str(p.id), "slug": p.slug, "name": p.name, "organization": p.organization.slug}
                    for p in projects
                ]
            }

        return await _call(_online(work))

    @server.tool(annotations=READ_ONLY)
    async def search_memory(
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=2000,
                description="What you want to know: a question, an error message, an identifier or a path.",
            ),
        ],
        project: ProjectArg = None,
        files: FilesArg = [],  # noqa: B006 (a schema default: the SDK copies it per call)
        types: Annotated[
            list[str],
            Field(max_length=20, description="Only these memory types, e.g. gotcha, decision, dead_end."),
        ] = [],  # noqa: B006
        phase: PhaseArg = None,
        limit: Annotated[int, Field(ge=1, le=50, description="How many memories to return.")] = 8,
    ) -> dict[str, Any]:
        """Search the team's memory of this codebase (semantic, code-aware keyword and code-graph
        search), ranked by relevance, trust and confidence. Each result has an id (for
        memory_feedback), its type, content and a citation. Offline, the device's copy answers."""
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

    @server.tool(annotations=READ_ONLY)
    async def get_context(
        task: Annotated[
            str, Field(max_length=4000, description="The task you are about to do, in a sentence or two.")
        ] = "",
        files: FilesArg = [],  # noqa: B006
        project: ProjectArg = None,
        phase: PhaseArg = None,
        session_id: SessionArg = "",
        token_budget: Annotated[
            int | None,
            Field(ge=50, le=32000, description="Most tokens of context to return (default: the phase's)."),
        ] = None,
    ) -> dict[str, Any]:
        """Get the briefing for a task: the most relevant memories packed into one text within a
        token budget, each cited as [Memory #id]. Call it when you start a task or move to new
        files, with the task and/or the files in play."""
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

    @server.tool(annotations=WRITES)
    async def remember(
        content: Annotated[
            str,
            Field(
                min_length=1,
                max_length=MAX_CONTENT_CHARS,
                description="The knowledge itself, specific and self-contained (what, where, why).",
            ),
        ],
        type: Annotated[
            RememberType,
            Field(
                description=(
                    "gotcha: a trap in the code; decision: a choice and its reason; error_pattern: an error"
                    " and its fix; dead_end: an approach that failed; workflow_recipe: steps for a"
                    " recurring task; pattern, preference, requirement, module_insight, causal_dependency,"
                    " e2e_observation, work_state."
                )
            ),
        ],
        related_files: FilesArg = [],  # noqa: B006
        tags: Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=30)] = [],  # noqa: B006
        project: ProjectArg = None,
        payload: Annotated[
            dict[str, Any] | None, Field(description="Structured fields for dead_end and workflow_recipe.")
        ] = None,
        session_id: SessionArg = "",
    ) -> dict[str, Any]:
        """Record something a later session should know about this codebase: one fact per memory,
        naming the files it concerns, never a secret. Offline, it waits on the device for the next
        sync."""

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

    @server.tool(annotations=WRITES)
    async def memory_feedback(
        memory_id: Annotated[str, Field(min_length=1, max_length=64, description="The memory's id.")],
        kind: Annotated[
            Literal["confirm", "correct", "flag", "used", "helpful"],
            Field(
                description=(
                    "confirm: it is right; correct: it is partly wrong (the fixed text in `content`); flag:"
                    " it is wrong or harmful; used: you acted on it; helpful: it saved you work."
                )
            ),
        ],
        content: Annotated[
            str | None,
            Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="For `correct`: the fixed text."),
        ] = None,
        note: Annotated[str, Field(max_length=2000, description="Why, in a sentence.")] = "",
        session_id: SessionArg = "",
    ) -> dict[str, Any]:
        """Tell the memory whether a memory held up: confirm, correct, flag, used or helpful."""
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

    @server.tool(annotations=READ_ONLY)
    async def recipes(
        task: Annotated[
            str,
            Field(max_length=2000, description="The task, to find recipes for it; empty for recent ones."),
        ] = "",
        project: ProjectArg = None,
        limit: Annotated[int, Field(ge=1, le=20)] = 5,
    ) -> dict[str, Any]:
        """Find workflow recipes: the step-by-step ways this team does recurring tasks."""

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

    @server.tool(annotations=READ_ONLY)
    async def impact(
        target: Annotated[
            str,
            Field(
                min_length=1,
                max_length=800,
                description="A repository-relative file path, or `path:Symbol` for a function or class.",
            ),
        ],
        project: ProjectArg = None,
        depth: Annotated[int, Field(ge=1, le=10, description="How many hops of dependents to follow.")] = 3,
    ) -> dict[str, Any]:
        """What may break if a file or symbol changes: its direct and transitive dependents, the
        tests among them and the memories linked to it."""
        return await _call(
            _online(lambda: backend.api.graph.impact(backend.project(project), target, depth=depth))
        )

    @server.tool(annotations=READ_ONLY)
    async def dependencies(
        file: Annotated[
            str, Field(min_length=1, max_length=500, description="A repository-relative file path.")
        ],
        project: ProjectArg = None,
        depth: Annotated[int, Field(ge=1, le=10, description="How many hops to follow.")] = 1,
    ) -> dict[str, Any]:
        """The files a file depends on (imports, calls, inheritance), up to `depth` hops."""
        return await _call(
            _online(lambda: backend.api.graph.dependencies(backend.project(project), file, depth=depth))
        )

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
