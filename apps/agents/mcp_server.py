"""The MCP server's tools: names, descriptions and argument schemas a model chooses by, each
bridged from the SDK's async handler to its synchronous body in `apps.agents.mcp_tools`.

Who is calling was settled before any MCP handling (`apps.agents.mcp_asgi` refuses a missing or
wrong key with a 401): the handler finds that principal on the HTTP request that carried the
call. A failure the caller can fix (a bad argument, a missing permission, an id that is not
theirs) becomes a tool error with the API's message, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from apps.agents import mcp_tools
from apps.memories.validation import MAX_CONTENT_CHARS
from apps.tenants.principal import Principal
from apps.tenants.ratelimit import policy
from apps.tenants.ratelimit.throttle import charge
from memorysaas.kernel.errors import ApiError
from memorysaas.kernel.schemas import refuse_unstorable

PRINCIPAL_SCOPE_KEY = "memorysaas.principal"

INSTRUCTIONS = """\
memorysaas is your team's shared memory of this codebase: gotchas, decisions, error patterns,
dead ends and workflow recipes that earlier agent sessions and people recorded, plus a code graph.
- Before working on a task, call get_context with the task and the files in play.
- To look something up (an error message, an identifier, "why is X done this way"), call search_memory.
- Before changing a file, impact tells you what depends on it; dependencies what it depends on.
- When you learn something a later session should know, call remember.
- When a memory helped, was wrong or is out of date, call memory_feedback with its id.
Project-limited keys need no `project` argument; otherwise call list_projects first."""

mcp = MCPServer(name="memorysaas", instructions=INSTRUCTIONS)

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

ProjectArg = Annotated[
    str | None,
    Field(
        description="Project id or slug (see list_projects). Leave out when the key is limited to one project."
    ),
]
FilesArg = Annotated[
    list[Annotated[str, Field(max_length=500)]],
    Field(description="Repository-relative paths of the files in play.", max_length=100),
]


def principal_of(ctx: Context) -> Principal:
    request = ctx.request_context.request
    principal = getattr(request, "scope", {}).get(PRINCIPAL_SCOPE_KEY)
    if not isinstance(principal, Principal):
        raise ToolError("Not authenticated: send 'Authorization: Bearer <api key>'.")
    return principal


# The tools that cost what a REST search or context costs are charged the same weight (the
# names of RATE_LIMIT_WEIGHTS); every other call weighs 1, as a REST request does.
TOOL_WEIGHTS = {"search_memory": "search", "recipes": "search", "get_context": "context"}


def charge_call(principal: Principal, tool: str) -> None:
    """Charge the key's (and its organization's) rate-limit buckets for one tool call, as
    the REST API charges a request: MCP is no way around the limits."""
    if not settings.RATE_LIMIT_ENABLED:
        return
    refused = charge(principal, weight=policy.operation_weight(TOOL_WEIGHTS.get(tool, "")))
    if refused is not None:
        raise refused


def call_in_django(body: Callable[..., Any], principal: Principal, arguments: dict[str, Any]) -> Any:
    try:
        charge_call(principal, body.__name__)
        return body(principal=principal, **arguments)
    finally:
        # (the thread is one of the request's own, as in a Django view: its connections go back now)
        connections.close_all()


async def run_tool(ctx: Context, body: Callable[..., Any], **arguments: Any) -> Any:
    principal = principal_of(ctx)
    try:
        # (PostgreSQL stores no NUL character: said here, not as a failed query)
        refuse_unstorable(arguments)
    except ValueError as error:
        raise ToolError(str(error)) from None
    try:
        return await sync_to_async(call_in_django, thread_sensitive=True)(body, principal, arguments)
    except ApiError as error:
        raise ToolError(error.message) from None


@mcp.tool(annotations=READ_ONLY)
async def list_projects(ctx: Context) -> dict[str, Any]:
    """List the projects this API key can work on (id, slug, name, organization). Call it first
    with an organization-wide key to find the `project` to pass to the other tools; a key limited
    to one project lists just that one and needs no `project` argument anywhere."""
    return await run_tool(ctx, mcp_tools.list_projects)


@mcp.tool(annotations=READ_ONLY)
async def search_memory(
    ctx: Context,
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
        Field(
            max_length=20,
            description="Only these memory types, e.g. gotcha, decision, error_pattern, dead_end, workflow_recipe.",
        ),
    ] = [],  # noqa: B006
    phase: Annotated[
        str | None,
        Field(
            max_length=40, description="Work phase: define, implement, validate, refine, explore or reflect."
        ),
    ] = None,
    limit: Annotated[int, Field(ge=1, le=50, description="How many memories to return.")] = 8,
) -> dict[str, Any]:
    """Search the team's memory of this codebase: hybrid semantic, keyword (code-aware:
    `verifyJwt`, `auth/tokens.ts`) and code-graph search, ranked by relevance, trust and
    confidence. Use it to look something up on demand — an error you hit, why code is the way it
    is, how a module is meant to be used. Each result has an id (for memory_feedback), its type,
    content, confidence and a citation to quote. For a ready-made briefing at the start of a
    task use get_context instead."""
    return await run_tool(
        ctx,
        mcp_tools.search_memory,
        project=project,
        query=query,
        files=files,
        types=types,
        phase=phase,
        limit=limit,
    )


@mcp.tool(annotations=READ_ONLY)
async def get_context(
    ctx: Context,
    task: Annotated[
        str, Field(max_length=4000, description="The task you are about to do, in a sentence or two.")
    ] = "",
    files: FilesArg = [],  # noqa: B006
    project: ProjectArg = None,
    phase: Annotated[
        str | None,
        Field(
            max_length=40, description="Work phase: define, implement, validate, refine, explore or reflect."
        ),
    ] = None,
    session_id: Annotated[
        str, Field(max_length=100, description="An observer session id, when you have one.")
    ] = "",
    token_budget: Annotated[
        int | None,
        Field(ge=50, le=32000, description="Most tokens of context to return (default: the phase's)."),
    ] = None,
) -> dict[str, Any]:
    """Get the briefing for a task: the most relevant memories (gotchas, error patterns,
    decisions, dead ends, recipes) packed into one text within a token budget, each cited as
    [Memory #id]. Call it when you start a task or move to new files, with the task and/or the
    files in play (at least one of them). Stale and low-confidence memories are left out."""
    return await run_tool(
        ctx,
        mcp_tools.get_context,
        project=project,
        task=task,
        files=files,
        phase=phase,
        session_id=session_id,
        token_budget=token_budget,
    )


RememberType = Literal[
    "gotcha",
    "decision",
    "preference",
    "pattern",
    "requirement",
    "error_pattern",
    "module_insight",
    "dead_end",
    "workflow_recipe",
    "causal_dependency",
    "e2e_observation",
    "work_state",
]


@mcp.tool(annotations=WRITES)
async def remember(
    ctx: Context,
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
                "gotcha: a trap in the code; decision: a choice and its reason; preference: how the team"
                " likes things done; pattern: a convention to follow; requirement: a hard constraint;"
                " error_pattern: an error and its fix; module_insight: how a module works; dead_end: an"
                " approach that failed (payload: approach_tried, why_it_failed); workflow_recipe: steps"
                " for a recurring task (payload: task_pattern, steps[{order, description}])."
            )
        ),
    ],
    related_files: FilesArg = [],  # noqa: B006
    tags: Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=30)] = [],  # noqa: B006
    project: ProjectArg = None,
    payload: Annotated[
        dict[str, Any] | None, Field(description="Structured fields for dead_end and workflow_recipe.")
    ] = None,
    session_id: Annotated[str, Field(max_length=100, description="An observer session id, if any.")] = "",
) -> dict[str, Any]:
    """Record something a later session should know about this codebase — a gotcha, a decision
    and its reason, an error and its fix, a dead end. Keep each memory to one fact, name the files
    it concerns, and never store secrets (they are redacted). Returns the new memory's id."""
    return await run_tool(
        ctx,
        mcp_tools.remember,
        project=project,
        content=content,
        type=type,
        related_files=related_files,
        tags=tags,
        payload=payload,
        session_id=session_id,
    )


@mcp.tool(annotations=WRITES)
async def memory_feedback(
    ctx: Context,
    memory_id: Annotated[str, Field(min_length=1, max_length=64, description="The memory's id.")],
    kind: Annotated[
        Literal["confirm", "correct", "flag", "used", "helpful"],
        Field(
            description=(
                "confirm: it is right; correct: it is partly wrong (give the fixed text in `content`);"
                " flag: it is wrong or harmful (lowers confidence, sends it to review); used: you acted"
                " on it; helpful: it saved you work."
            )
        ),
    ],
    content: Annotated[
        str | None,
        Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="For `correct`: the fixed text."),
    ] = None,
    note: Annotated[str, Field(max_length=2000, description="Why, in a sentence.")] = "",
    session_id: Annotated[str, Field(max_length=100, description="An observer session id, if any.")] = "",
) -> dict[str, Any]:
    """Tell the memory whether a memory (from search_memory, get_context or recipes) held up:
    confirm it, correct it, flag it as wrong, or say you used it or it helped. This is how good
    memories rise and wrong ones get reviewed."""
    return await run_tool(
        ctx,
        mcp_tools.memory_feedback,
        memory_id=memory_id,
        kind=kind,
        content=content,
        note=note,
        session_id=session_id,
    )


@mcp.tool(annotations=READ_ONLY)
async def recipes(
    ctx: Context,
    task: Annotated[
        str,
        Field(
            max_length=2000, description="The task, to find recipes for it; leave empty to list recent ones."
        ),
    ] = "",
    project: ProjectArg = None,
    limit: Annotated[int, Field(ge=1, le=20)] = 5,
) -> dict[str, Any]:
    """Find workflow recipes: the step-by-step ways this team does recurring tasks (adding an
    endpoint, a migration, a release), with the canonical file for each step. Call it before a
    task that sounds routine."""
    return await run_tool(ctx, mcp_tools.recipes, project=project, task=task, limit=limit)


@mcp.tool(annotations=READ_ONLY)
async def impact(
    ctx: Context,
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
    """What may break if a file or symbol changes: the files that depend on it directly and
    transitively (with edge types and weights), the tests among them, and the memories linked to
    it. Call it before editing shared code."""
    return await run_tool(ctx, mcp_tools.impact, project=project, target=target, depth=depth)


@mcp.tool(annotations=READ_ONLY)
async def dependencies(
    ctx: Context,
    file: Annotated[str, Field(min_length=1, max_length=500, description="A repository-relative file path.")],
    project: ProjectArg = None,
    depth: Annotated[int, Field(ge=1, le=10, description="How many hops to follow.")] = 1,
) -> dict[str, Any]:
    """The files a file depends on (imports, calls, inheritance), up to `depth` hops: what to
    read to understand it."""
    return await run_tool(ctx, mcp_tools.dependencies, project=project, file=file, depth=depth)
