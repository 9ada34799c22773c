"""Turning promoted signals into readable memory text.

Deterministic templates always produce the text. When an LLM is configured (OPENAI_API_KEY),
`rewrite` makes exactly one chat call for the whole batch (never more than one per
finalize) and keeps the templates for anything the model leaves out or gets wrong.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

PROMPT = (
    "You turn observations of AI coding agents working in a repository into short memories for "
    "future agents. For each numbered draft, write 1-3 plain sentences that state the fact and "
    "what to do about it. Keep file paths and identifiers exact, invent nothing, and drop words "
    'like "agents were observed". Answer with JSON: {"memories": [{"i": <number>, "content": "..."}]}.'
)


def _files(files: list[str], n: int = 3) -> str:
    shown = ", ".join(f"`{f}`" for f in files[:n])
    return shown + (f" and {len(files) - n} more" if len(files) > n else "")


# How an agent announces that it corrects itself; the memory keeps what it learned.
_CORRECTION_OPENER = re.compile(
    r"^(?:actually|wait|hmm|oh|ah|correction|ah,? I see|oh,? I see|I see|it turns out(?: that)?)[,.:;!]?\s*(?:[—–-]\s*)?",
    re.IGNORECASE,
)


def _what_was_learned(sentence: str) -> str:
    """`Actually, totals are computed in services.py` → `Totals are computed in services.py`."""
    rest = _CORRECTION_OPENER.sub("", sentence.strip(), count=1)
    return rest[:1].upper() + rest[1:] if rest else sentence


def _sessions(n: int) -> str:
    return "1 session" if n == 1 else f"{n} sessions"


def template(kind: str, data: dict[str, Any], *, sessions: int, files: list[str]) -> str:
    d = data
    if kind == "self_correction":
        return _what_was_learned(d["sentence"]) + (f" (while working on `{files[0]}`)" if files else "")
    if kind == "co_access":
        a, b = files[:2]
        direction = ""
        if d.get("directional_share", 0) >= 0.8:
            direction = f" Agents open `{d['first']}` first."
        kinds = d.get("task_types") or []
        across = f" across {', '.join(kinds)} work" if len(kinds) > 1 else ""
        return (
            f"`{a}` and `{b}` are coupled: agents needed both in {_sessions(sessions)}{across}. "
            f"When changing one, check the other.{direction}"
        )
    if kind == "error_retry":
        fix = f" Resolved by: {d['resolved_by']}." if d.get("resolved_by") else ""
        where = f" Seen around {_files(files, 2)}." if files else ""
        return f"`{d['tool']}` fails with: {d['message']} ({_sessions(sessions)}).{fix}{where}"
    if kind == "parallel_conflict":
        return (
            f"Parallel agents on the same work unit both edited `{files[0]}`. "
            "Give work on this file to one agent instead of splitting it."
        )
    if kind == "external_reference":
        where = f" while working in `{d['module']}`" if d.get("module") else ""
        return (
            f'Agents look up "{d["query"]}" on the web{where} ({_sessions(sessions)}). '
            "The answer belongs in the repository's docs; until then, it is a known gap."
        )
    if kind == "read_abandon":
        return (
            f"Agents open `{files[0]}` first but the change belongs in `{d['went_to']}` "
            f"({_sessions(sessions)}). Start from `{d['went_to']}`."
        )
    if kind == "repeated_grep":
        found = f" What they were after is in `{d['found'][0]}`." if d.get("found") else ""
        return f'Searching for "{d["pattern"]}" takes agents several tries ({_sessions(sessions)}).{found}'
    if kind == "test_order":
        share = d.get("test_first_share", 0)
        return (
            f"In `{d['module']}`, tests came before the implementation in {round(share * 100)}% of "
            f"{_sessions(sessions)}: start from {_files(files, 2) if files else 'the tests'}."
        )
    if kind == "sequence":
        steps = "; ".join(d["descriptions"])
        return f"A sequence that worked in {_sessions(sessions)}: {steps}."
    if kind == "step_overrun":
        return (
            f"Work in `{d['module']}` takes {d['ratio']}x the planned steps "
            f"({d['actual']:.0f} actual vs {d['planned']:.0f} planned on average, {_sessions(sessions)}). "
            "Plan for more steps here."
        )
    if kind == "import_chase":
        return f"Reading `{files[0]}` leads agents to `{files[1]}`, which it imports ({_sessions(sessions)})."
    if kind == "config_touch":
        return (
            f"Changes in `{d['module']}` also need `{d['config']}`: it was edited together with "
            f"{_files(d['edited_with'])} ({_sessions(sessions)})."
        )
    if kind == "glob_ignore":
        return (
            f'The glob "{d["pattern"]}" returns files agents do not use ({d["returned"]} results, '
            f"{d['read']} read; {_sessions(sessions)}). Use a narrower pattern."
        )
    if kind == "context_token_spike":
        return (
            f"`{d['module']}` is context-expensive: about {d['average_tokens']:,.0f} input tokens per "
            f"session ({_sessions(sessions)}). Split work here into smaller sessions."
        )
    if kind == "backtrack":
        return (
            f"`{files[0]}` is often edited again a few steps after a first change ({_sessions(sessions)}). "
            "Read it fully before changing it."
        )
    if kind == "time_anomaly":
        return (
            f"Agents spend long on `{files[0]}` before an error or a re-edit ({_sessions(sessions)}); "
            "it is harder than it looks."
        )
    if kind == "prefetch":
        always = _files(d["always"], 12) if d["always"] else "none"
        often = f" Often also: {_files(d['often'], 12)}." if d.get("often") else ""
        return (
            f"When working in `{d['module']}`, read first: {always} "
            f"(read in over 80% of {_sessions(sessions)}).{often}"
        )
    if kind == "dead_end":
        return f"Dead end: {d['why']}" + (f" (task: {d['task']})" if d.get("task") else "")
    if kind == "work_unit_outcome":
        edited = f" Edited {_files(files)}." if files else ""
        return f"{d['label'] or 'Work unit'}: {d['outcome']} in {d['steps']} steps.{edited}"
    if kind == "qa_failure":
        error = f": {d['error']}" if d.get("error") else ""
        fixed = f" Fixed by changing {_files(d['fixed_by'])}." if d.get("fixed_by") else ""
        named = "" if d.get("fixed_by") or not d.get("files") else f" (in {_files(d['files'])})"
        return f"QA check `{d['name']}` failed{error}{named}.{fixed}"
    if kind == "commit":
        task = f' for "{d["task"]}"' if d.get("task") else ""
        return f"Commit `{d['sha'][:12]}`{task} changed {_files(files, 8)} together."
    raise ValueError(f"no template for {kind}")


def rewrite(drafts: list[dict[str, Any]]) -> tuple[list[str | None], bool]:
    """One LLM call for all drafts ({"kind", "content", "data"}): the rewritten texts (None
    where the template stays) and whether a call was made."""
    if not settings.OPENAI_API_KEY or not drafts:
        return [None] * len(drafts), False
    try:
        from memorysaas.kernel.llm import chat_client

        client = chat_client(timeout=15.0)
        listing = "\n".join(f"{i}. [{d['kind']}] {d['content']}" for i, d in enumerate(drafts))
        response = client.chat.completions.create(
            model=settings.OPENAI_CHAT_MODEL,
            messages=[{"role": "system", "content": PROMPT}, {"role": "user", "content": listing}],
            response_format={"type": "json_object"},
            max_tokens=200 + 120 * len(drafts),
            temperature=0,
        )
        body = json.loads(response.choices[0].message.content or "{}")
    except Exception:
        logger.warning("Observer synthesis call failed; keeping templates", exc_info=True)
        return [None] * len(drafts), True
    out: list[str | None] = [None] * len(drafts)
    for item in body.get("memories", []) if isinstance(body, dict) else []:
        try:
            i, content = int(item["i"]), str(item["content"]).strip()
        except (KeyError, TypeError, ValueError):
            continue
        if 0 <= i < len(drafts) and 10 <= len(content) <= 2000:
            out[i] = content
    return out, True
