"""Renderers for data exports: complete JSON, readable Markdown, and a CLAUDE.md an agent can
load. Each takes the export envelope (plain data) and returns (bytes, file extension)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

# Headings of the CLAUDE.md file, in the order an agent should read them.
CLAUDE_SECTIONS: list[tuple[str, tuple[str, ...]]] = [
    ("Rules and conventions", ("requirement", "preference", "decision")),
    ("Pitfalls", ("gotcha", "error_pattern", "dead_end")),
    ("How the code fits together", ("module_insight", "causal_dependency", "pattern")),
    ("Workflows", ("workflow_recipe", "prefetch_pattern")),
    ("Other notes", ()),
]
CLAUDE_MIN_CONFIDENCE = 0.5


def render(fmt: str, envelope: dict[str, Any]) -> tuple[bytes, str]:
    renderer, extension = RENDERERS[fmt]
    return renderer(envelope).encode("utf-8"), extension


def as_json(envelope: dict[str, Any]) -> str:
    return json.dumps(envelope, indent=2, ensure_ascii=False, default=str) + "\n"


def _title(envelope: dict[str, Any]) -> str:
    if "organization" in envelope:
        return f"Organization {envelope['organization']['name']}"
    profile = envelope.get("profile", {})
    return profile.get("name") or profile.get("email", "My data")


def _scalar_lines(record: dict[str, Any]) -> list[str]:
    return [
        f"- **{key}**: {value}"
        for key, value in record.items()
        if value not in (None, "", [], {}) and not isinstance(value, (dict, list))
    ]


def _memory_block(memory: dict[str, Any]) -> list[str]:
    lines = [f"#### {memory['type']} · {memory['id'][:8]}", "", memory["content"], ""]
    facts = {
        "project": memory.get("project"),
        "scope": memory.get("scope"),
        "source": memory.get("source"),
        "confidence": memory.get("confidence"),
        "files": ", ".join(memory.get("related_files") or []),
        "tags": ", ".join(memory.get("tags") or []),
        "created": memory.get("created_at"),
        "version": memory.get("version"),
    }
    return [*lines, *_scalar_lines(facts), ""]


def as_markdown(envelope: dict[str, Any]) -> str:
    out = [
        f"# memorysaas export — {_title(envelope)}",
        "",
        f"Generated {envelope['export']['generated_at']}.",
        "",
    ]
    for section, value in envelope.items():
        if section in ("export", "memories"):
            continue
        out += [f"## {section.replace('_', ' ').capitalize()}", ""]
        if isinstance(value, dict):
            out += _scalar_lines(value) or ["(nothing)"]
        elif isinstance(value, list):
            for item in value or []:
                if isinstance(item, dict):
                    out.append(
                        "- " + "; ".join(f"{k}: {v}" for k, v in item.items() if v not in (None, "", [], {}))
                    )
                else:
                    out.append(f"- {item}")
            if not value:
                out.append("(nothing)")
        out.append("")
    memories = envelope.get("memories") or []
    out += [f"## Memories ({len(memories)})", ""]
    by_project: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for memory in memories:
        by_project[memory.get("project") or "—"].append(memory)
    for project, items in sorted(by_project.items()):
        out += [f"### {project}", ""]
        for memory in items:
            out += _memory_block(memory)
    return "\n".join(out).rstrip() + "\n"


def as_claude_md(envelope: dict[str, Any]) -> str:
    """Only what an agent should act on: live, confident memories, grouped by what they are for."""
    memories = [
        m
        for m in envelope.get("memories") or []
        if not m.get("deprecated") and (m.get("confidence") or 0) >= CLAUDE_MIN_CONFIDENCE
    ]
    out = [
        "# CLAUDE.md",
        "",
        f"Project knowledge exported from memorysaas for {_title(envelope)} "
        f"on {envelope['export']['generated_at'][:10]}. Each line is one memory; files it concerns follow it.",
        "",
    ]
    placed: set[str] = set()
    for heading, types in CLAUDE_SECTIONS:
        chosen = [m for m in memories if m["id"] not in placed and (not types or m["type"] in types)]
        if not chosen:
            continue
        out += [f"## {heading}", ""]
        for memory in sorted(chosen, key=lambda m: (m.get("project") or "", -(m.get("confidence") or 0))):
            placed.add(memory["id"])
            content = " ".join(memory["content"].split())
            files = memory.get("related_files") or []
            out.append(f"- {content}" + (f" (files: {', '.join(files)})" if files else ""))
        out.append("")
    if not placed:
        out += ["No memories yet.", ""]
    return "\n".join(out).rstrip() + "\n"


RENDERERS: dict[str, tuple[Callable[[dict[str, Any]], str], str]] = {
    "json": (as_json, "json"),
    "markdown": (as_markdown, "md"),
    "claude_md": (as_claude_md, "CLAUDE.md"),
}
