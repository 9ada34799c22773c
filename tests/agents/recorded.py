"""A recorded Claude Code session (fixtures/claude_code_session.jsonl): the hook deliveries of one
session in the shapes of Claude Code's hooks reference, with `{session_id}`, `{cwd}` and `{n}`
(a per-session part of the tool-use ids) to fill in, so one recording replays as many sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORDING = Path(__file__).parent / "fixtures" / "claude_code_session.jsonl"
CWD = "/home/dev/shop"


def deliveries(session_id: str, *, n: int = 1, cwd: str = CWD) -> list[dict[str, Any]]:
    lines = RECORDING.read_text().splitlines()
    filled = [
        line.replace("{session_id}", session_id).replace("{cwd}", cwd).replace("{n}", f"{n:04d}")
        for line in lines
        if line.strip()
    ]
    return [json.loads(line) for line in filled]


def events_of(deliveries_: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [d for d in deliveries_ if d["hook_event_name"] == name]
