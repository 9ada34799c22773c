"""Automatic capture at finalize: what a session's validations, commits and E2E tool calls teach,
as promotion candidates beside the behavioural signals.

- Each failed check of a validation becomes an `error_pattern` (source `qa_auto`). Its pattern
  tag is made of the check and its normalised error, so the same failure in a rerun of the task
  reinforces the memory instead of adding another.
- Each of the last few commits of a validated session becomes a `module_insight` (source
  `commit_auto`): which files changed together for the task.
- Browser and app-driving tool calls (e2e.py classifies them) become `e2e_observation`s (source
  `mcp_auto`), always for review.
- The session's commits tag what it promotes (`commit_sha`): the latest commit that changed one
  of a memory's files, else the one that closed the session. A client later reports the files
  changed since that commit and the memories about them turn stale (memories.services.files).
"""

from __future__ import annotations

import re
from typing import Any

from apps.observer import e2e, synthesis, text_rules
from apps.observer.promotion import Candidate, T_ident
from apps.observer.scratchpad import Scratchpad

QA_CONFIDENCE = 0.8
# Seen once, by automation that can misread it: a second session's sighting confirms it.
E2E_CONFIDENCE = 0.75
# A commit's record says what changed together for a task, not why: it ranks below what was learned.
COMMIT_CONFIDENCE = 0.6
COMMITS_RECORDED = 3
# A commit named as git names it: 7 to 40 hex digits (64 in a SHA-256 repository).
COMMIT_SHA = re.compile(r"^[0-9a-f]{7,64}$")


def _fixed_by(pad: Scratchpad, failed_at: int) -> list[str]:
    """Files edited after a failed validation, when a later one passed: what fixed it."""
    later = [v for v in pad.validations if v["step"] >= failed_at and v["passed"]]
    if not later:
        return []
    passed_at = later[0]["step"]
    return [
        path
        for path, entry in pad.files.items()
        if entry[4] is not None and failed_at < entry[4] <= passed_at
    ][:5]


def qa_candidates(pad: Scratchpad) -> list[Candidate]:
    """One `error_pattern` per failed check, each check once (its first failure)."""
    out: dict[str, Candidate] = {}
    for validation in pad.validations:
        for failure in validation.get("failures", ()):
            error = text_rules.normalize_error(failure["error"]) if failure["error"] else ""
            ident = T_ident("qa_failure", f"{failure['name']}|{error}")
            if ident in out:
                continue
            data = {**failure, "fixed_by": _fixed_by(pad, validation["step"])}
            files = list(dict.fromkeys([*failure["files"], *data["fixed_by"]]))[:20]
            out[ident] = Candidate(
                kind="qa_failure",
                ident=ident,
                memory_type="error_pattern",
                data=data,
                confidence=QA_CONFIDENCE,
                files=files,
                modules=text_rules.modules_of(files, 10),
                source="qa_auto",
                needs_review=False,
                content=synthesis.template("qa_failure", data, sessions=1, files=files),
                tags=["qa_failure"],
            )
    return list(out.values())


def commit_for(files: list[str], commits: list[dict[str, Any]]) -> str:
    """The commit a memory about `files` carries: the latest that changed one of them, else the
    last one (that closed the session); "" when the session made none git would name."""
    named = _named(commits)
    if not named:
        return ""
    wanted = set(files)
    touching = [c for c in named if wanted.intersection(c.get("files") or ())]
    return str((touching or named)[-1]["sha"]).lower()


def _named(commits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in commits if COMMIT_SHA.match(str(c.get("sha", "")).lower())]


def commit_candidates(pad: Scratchpad, task: str) -> list[Candidate]:
    """A `module_insight` for each of the session's last commits that changed files."""
    out = []
    for commit in [c for c in _named(pad.commits) if c.get("files")][-COMMITS_RECORDED:]:
        sha = str(commit["sha"]).lower()
        files = [f for f in commit["files"] if f][:20]
        data = {"sha": sha, "task": task[:200], "files": files}
        out.append(
            Candidate(
                kind="commit",
                ident=T_ident("commit", sha),
                memory_type="module_insight",
                data=data,
                confidence=COMMIT_CONFIDENCE,
                files=files,
                modules=text_rules.modules_of(files, 10),
                source="commit_auto",
                needs_review=False,
                content=synthesis.template("commit", data, sessions=1, files=files),
                tags=["commit", f"commit:{sha[:12]}"],
                commit_sha=sha,
            )
        )
    return out


def e2e_candidates(pad: Scratchpad) -> list[Candidate]:
    """An `e2e_observation` for each lesson of the session's browser and app-driving calls."""
    calls = [
        e2e.Call(step, tool, target, is_error, result) for step, tool, target, is_error, result in pad.e2e
    ]
    out = []
    for seen in e2e.classify(calls, normalize=text_rules.normalize_error):
        tool = e2e.tool_parts(seen.tool)[1]
        payload = {"observation_type": seen.observation_type, "mcp_tool_used": seen.tool[:200]}
        if seen.app_state:
            payload["app_state"] = seen.app_state[:500]
        out.append(
            Candidate(
                kind="e2e",
                ident=T_ident("e2e", seen.key),
                memory_type="e2e_observation",
                data={"observation": seen.observation_type},
                confidence=E2E_CONFIDENCE,
                payload=payload,
                source="mcp_auto",
                needs_review=True,
                content=seen.content,
                tags=["e2e", f"e2e:{seen.observation_type}", tool[:100]],
            )
        )
    return out
