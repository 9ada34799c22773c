"""The MCP tools both memorysaas servers offer — the service's at `/mcp` and `memorysaas mcp` on a
device — in one place: their names, the descriptions a model chooses by, and their arguments'
schemas. Pure (pydantic and the MCP SDK's types, no Django): the server imports this module as it
imports the code tokens and the memory kinds, so the two servers cannot drift apart.

Each tool is written as a signature whose docstring is its description; `register` gives a
server a handler with that signature, so the SDK derives the same argument schema on both.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from mcp.types import ToolAnnotations
from pydantic import Field

INSTRUCTIONS = """\
memorysaas is your team's shared memory of this codebase: gotchas, decisions, error patterns,
dead ends and workflow recipes that earlier agent sessions and people recorded, plus a code graph.
- Before working on a task, call get_context with the task and the files in play.
- To look something up (an error message, an identifier, "why is X done this way"), call search_memory.
- Before changing a file, impact tells you what depends on it; dependencies what it depends on.
- When you learn something a later session should know, call remember.
- When a memory helped, was wrong or is out of date, call memory_feedback with its id."""

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
MAX_CONTENT_CHARS = 4000  # a memory's content (the server's own limit: apps.memories.validation)

ProjectRef = Annotated[
    str | None,
    Field(
        description="Project id or slug (see list_projects). Leave out when the key is limited to one"
        " project, or (`memorysaas mcp`) to use the logged-in one."
    ),
]
Files = Annotated[
    list[Annotated[str, Field(max_length=500)]],
    Field(description="Repository-relative paths of the files in play.", max_length=100),
]
Phase = Annotated[
    str | None,
    Field(max_length=40, description="Work phase: define, implement, validate, refine, explore or reflect."),
]
SessionId = Annotated[str, Field(max_length=100, description="An observer session id, if any.")]
MemoryType = Literal[
    "gotcha", "decision", "preference", "pattern", "requirement", "error_pattern", "module_insight",
    "dead_end", "workflow_recipe", "causal_dependency", "e2e_observation", "work_state",
]  # fmt: skip
Content = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_CONTENT_CHARS,
        description="The knowledge itself, specific and self-contained (what, where, why).",
    ),
]
FeedbackKind = Literal["confirm", "correct", "flag", "used", "helpful"]


def list_projects() -> dict[str, Any]:
    """List the projects this API key can work on (id, slug, name, organization). Call it first
    with an organization-wide key to find the `project` to pass to the other tools; a key limited
    to one project lists just that one and needs no `project` argument anywhere."""


def search_memory(
    query: Annotated[
        str,
        Field(
            min_length=1,
            max_length=2000,
            description="What you want to know: a question, an error message, an identifier or a path.",
        ),
    ],
    project: ProjectRef = None,
    files: Files = [],  # noqa: B006 (a schema default: the SDK copies it per call)
    types: Annotated[
        list[str],
        Field(
            max_length=20,
            description="Only these memory types, e.g. gotcha, decision, error_pattern, dead_end, workflow_recipe.",
        ),
    ] = [],  # noqa: B006
    phase: Phase = None,
    limit: Annotated[int, Field(ge=1, le=50, description="How many memories to return.")] = 8,
) -> dict[str, Any]:
    """Search the team's memory of this codebase: hybrid semantic, keyword (code-aware:
    `verifyJwt`, `auth/tokens.ts`) and code-graph search, ranked by relevance, trust and
    confidence. Use it to look something up on demand — an error you hit, why code is the way it
    is, how a module is meant to be used. Each result has an id (for memory_feedback), its type,
    content, confidence and a citation to quote. For a ready-made briefing at the start of a
    task use get_context instead."""


def get_context(
    task: Annotated[
        str, Field(max_length=4000, description="The task you are about to do, in a sentence or two.")
    ] = "",
    files: Files = [],  # noqa: B006
    project: ProjectRef = None,
    phase: Phase = None,
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


def remember(
    content: Content,
    type: Annotated[
        MemoryType,
        Field(
            description=(
                "gotcha: a trap in the code; decision: a choice and its reason; preference: how the team"
                " likes things done; pattern: a convention to follow; requirement: a hard constraint;"
                " error_pattern: an error and its fix; module_insight: how a module works; dead_end: an"
                " approach that failed (payload: approach_tried, why_it_failed); workflow_recipe: steps"
                " for a recurring task (payload: task_pattern, steps[{order, description}]); e2e_observation:"
                " what the running app did (payload: observation_type precondition|timing|ui_behavior|"
                "test_sequence|mcp_gotcha, mcp_tool_used); work_state: where the work was left (payload:"
                " methodology_state {...})."
            )
        ),
    ],
    related_files: Files = [],  # noqa: B006
    tags: Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=30)] = [],  # noqa: B006
    project: ProjectRef = None,
    payload: Annotated[
        dict[str, Any] | None, Field(description="Structured fields for dead_end and workflow_recipe.")
    ] = None,
    session_id: SessionId = "",
) -> dict[str, Any]:
    """Record something a later session should know about this codebase — a gotcha, a decision
    and its reason, an error and its fix, a dead end. Keep each memory to one fact, name the files
    it concerns, and never store secrets (they are redacted). Returns the new memory's id."""


def memory_feedback(
    memory_id: Annotated[str, Field(min_length=1, max_length=64, description="The memory's id.")],
    kind: Annotated[
        FeedbackKind,
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
    session_id: SessionId = "",
) -> dict[str, Any]:
    """Tell the memory whether a memory (from search_memory, get_context or recipes) held up:
    confirm it, correct it, flag it as wrong, or say you used it or it helped. This is how good
    memories rise and wrong ones get reviewed."""


def recipes(
    task: Annotated[
        str,
        Field(
            max_length=2000, description="The task, to find recipes for it; leave empty to list recent ones."
        ),
    ] = "",
    project: ProjectRef = None,
    limit: Annotated[int, Field(ge=1, le=20)] = 5,
) -> dict[str, Any]:
    """Find workflow recipes: the step-by-step ways this team does recurring tasks (adding an
    endpoint, a migration, a release), with the canonical file for each step. Call it before a
    task that sounds routine."""


def impact(
    target: Annotated[
        str,
        Field(
            min_length=1,
            max_length=800,
            description="A repository-relative file path, or `path:Symbol` for a function or class.",
        ),
    ],
    project: ProjectRef = None,
    depth: Annotated[int, Field(ge=1, le=10, description="How many hops of dependents to follow.")] = 3,
) -> dict[str, Any]:
    """What may break if a file or symbol changes: the files that depend on it directly and
    transitively (with edge types and weights), the tests among them, and the memories linked to
    it. Call it before editing shared code."""


def dependencies(
    file: Annotated[str, Field(min_length=1, max_length=500, description="A repository-relative file path.")],
    project: ProjectRef = None,
    depth: Annotated[int, Field(ge=1, le=10, description="How many hops to follow.")] = 1,
) -> dict[str, Any]:
    """The files a file depends on (imports, calls, inheritance), up to `depth` hops: what to
    read to understand it."""


TOOLS = (list_projects, search_memory, get_context, remember, memory_feedback, recipes, impact, dependencies)
ANNOTATIONS = {"remember": WRITES, "memory_feedback": WRITES}  # the others only read


class ToolServer(typing.Protocol):
    def add_tool(self, fn: Callable[..., Any], name: str | None = ..., **kwargs: Any) -> None: ...


def register(
    server: ToolServer,
    spec: Callable[..., Any],
    handler: Callable[..., Awaitable[Any]],
    *,
    context: type | None = None,
    note: str = "",
) -> None:
    """Add `handler` to `server` as the tool `spec` describes: its name, its description (with
    `note`, a server's own sentence, after it) and its arguments' schema. The handler is awaited
    with the validated arguments by keyword and, where `context` (the server's Context class) is
    given, the call's context as `ctx`."""
    hints = typing.get_type_hints(spec, include_extras=True)
    parameters = [
        parameter.replace(annotation=hints[parameter.name])
        for parameter in inspect.signature(spec).parameters.values()
    ]
    if context is not None:
        parameters.insert(
            0, inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=context)
        )

    async def tool(**arguments: Any) -> Any:
        return await handler(**arguments)

    tool.__name__ = tool.__qualname__ = spec.__name__
    tool.__signature__ = inspect.Signature(parameters, return_annotation=hints["return"])  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": hints["return"]}
    description = inspect.getdoc(spec) or ""
    server.add_tool(
        tool,
        name=spec.__name__,
        description=f"{description} {note}".strip(),
        annotations=ANNOTATIONS.get(spec.__name__, READ_ONLY),
    )
