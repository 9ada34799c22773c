"""Agent integrations over HTTP: Claude Code's hooks endpoint."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from ninja import Router
from pydantic import BaseModel, ConfigDict, Field

from apps.agents import services
from apps.agents.hooks import HANDLED, read_hook
from memorysaas.kernel.errors import ApiError
from memorysaas.kernel.metrics import count_hook_delivery

logger = logging.getLogger(__name__)
router = Router(tags=["agents"])


class HookIn(BaseModel):
    """A Claude Code hook's JSON input (https://code.claude.com/docs/en/hooks#hook-input-and-output).
    Every field is kept (a plain pydantic model: ninja's Schema reads declared fields only), and
    those this service does not read are ignored: Claude Code adds fields."""

    model_config = ConfigDict(extra="allow")

    session_id: str = Field(min_length=1, max_length=200)
    hook_event_name: str = Field(min_length=1, max_length=60)
    cwd: str = Field("", max_length=4000)


@router.post(
    "/hooks/claude-code",
    response=dict[str, Any],
    summary="Claude Code hooks (type http)",
)
def claude_code_hook(request, payload: HookIn, project: UUID | None = None):
    """Point Claude Code's hooks here (docs/agents/claude-code.md). SessionStart, UserPromptSubmit,
    PreToolUse, PostToolUse, PostToolUseFailure, Stop and SessionEnd feed the observer session
    that Claude Code's `session_id` names (opened on first sight, in the project the key is
    limited to or `?project=` names); SessionStart, UserPromptSubmit and PreToolUse of an Edit or
    Write answer with `hookSpecificOutput.additionalContext`. Other events answer `{}`.

    It never blocks the agent: once the key and project check out, a delivery that fails, or
    finds the database too slow, is logged and answered `{}` (or without its context), and no
    answer carries a `decision`. A wrong key, project or scope is a 4xx, which Claude Code
    treats as a non-blocking error."""
    event = payload.hook_event_name
    outcome = "failed"
    try:
        answer = services.hook_deliver(
            principal=request.auth, project_id=project, hook=read_hook(payload.model_dump())
        )
        outcome = "recorded"
        return answer
    except services.Refused:
        outcome = "refused"
        raise
    except ApiError as exc:
        outcome = "not_recorded"
        logger.warning("Claude Code %s delivery not recorded: %s", event, exc)
    except Exception:
        logger.exception("Claude Code %s delivery failed", event)
    finally:
        count_hook_delivery(hook="claude-code", event=event, outcome=outcome, known_events=HANDLED)
    return {}
