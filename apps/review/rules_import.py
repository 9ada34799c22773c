"""Turn an agent rules file (CLAUDE.md, AGENTS.md, .cursorrules) into typed memory drafts.

Pure: no Django. Each top-level bullet or paragraph becomes one rule; a numbered list under a
how-to heading ("Release", "Setup", "Workflow", "How to …") becomes one workflow recipe with
its steps; a fenced code block joins the rule before it. Types come from the words a rule uses
(seeds/003 §13 "Import CLAUDE.md / .cursorrules: parse rules into typed memories"), and the
person importing sees and can change every type in a preview before anything is saved.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from pydantic import ValidationError

from apps.memories import secrets_scan
from apps.memories.payloads import RecipeStep

MAX_RULES = 200
MAX_RULE_CHARS = 4000
MAX_STEP_CHARS = 500

# (no lazy group beside a run of spaces: `(.*?)\s*#*\s*$` backtracked cubically on a heading
# with a long run of spaces inside it, and a 2 KB paste held a worker for seconds)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^(\s*)(?:[-*+]|(\d+)[.)])\s+(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_PATH = re.compile(
    r"(?<![\w/.:-])((?:[\w.-]+/)+[\w.-]+|[\w-]+\.(?:py|pyi|ts|tsx|js|jsx|mjs|go|rs|java|kt|rb|php|cs|c|h|cpp|"
    r"md|toml|json|ya?ml|cfg|ini|sh|sql|html|css|lock|env))(?![\w/])"
)
_RECIPE_HEADING = re.compile(
    r"\b(how to|steps?|workflow|release|deploy|setup|set up|install|getting started|procedure|recipe|"
    r"migrat\w*|bootstrap|runbook|checklist)\b",
    re.I,
)
_INSIGHT_HEADING = re.compile(
    r"\b(architecture|structure|overview|layout|modules?|components?|design)\b", re.I
)
# `… @ file:line` at a step's end, searched for (the text before it is the description). The
# `@` must follow whitespace, so a run of spaces is tried from its start only.
_STEP_TAIL = re.compile(r"(?<=\s)@[ \t]+(?P<file>[^\s:]+)(?::(?P<line>\d+))?[ \t]*$")
_STEP_NUMBER = re.compile(r"^\s*(?:\d+[.)]|[-*+])(?:\s+|$)")
# Line breaks `str.splitlines` knows that JSON leaves unescaped: a step's JSON stays one line.
_JSON_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})

# First match wins; each pattern is matched against the rule's lower-cased text.
_TYPE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("gotcha", re.compile(r"\b(never|don'?t|do not|avoid|must not|mustn'?t|careful|beware|watch out|gotcha|"
                          r"pitfall|warning|caveat|be aware|not safe|breaks?|hangs?)\b")),
    ("error_pattern", re.compile(r"\b(error|errors|exception|traceback|fails?|failing|crash\w*|if you see)\b")),
    ("decision", re.compile(r"\b(we chose|we use \S+ because|decided|decision|rather than|instead of)\b")),
    ("requirement", re.compile(r"\b(must|required|requires|shall|needs?|has to|have to)\b")),
    ("preference", re.compile(r"\b(always|prefer|use|style|convention|naming|format\w*|should)\b")),
)  # fmt: skip


@dataclass
class Rule:
    type: str
    content: str
    heading: str = ""
    related_files: list[str] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    task_pattern: str = ""


def guess_type(text: str, heading: str = "") -> str:
    if heading and _INSIGHT_HEADING.search(heading):
        return "module_insight"
    lowered = text.lower()
    for memory_type, pattern in _TYPE_RULES:
        if pattern.search(lowered):
            return memory_type
    return "preference"


def _without_closing_hashes(text: str) -> str:
    """A heading's text without its optional closing `#`s (`## Setup ##`)."""
    text = text.strip()
    bare = text.rstrip("#")
    return bare.rstrip() if bare != text and (not bare or bare[-1] in " \t") else text


def mentioned_files(text: str, limit: int = 20) -> list[str]:
    """File paths the text names. Read from the text with its secrets redacted: a secret with
    slashes in it (an AWS secret key) looks like a path, and each field of a memory is scanned
    on its own, where the bare value has no `KEY=` beside it to give it away."""
    found: dict[str, None] = {}
    text = secrets_scan.scan(text).text
    for match in _PATH.finditer(text.replace("`", " ")):
        path = match.group(1).strip(".").removeprefix("./")
        if "://" in path or path.count(".") > 3 or len(path) > 500 or not path:
            continue
        found.setdefault(path, None)
    return list(found)[:limit]


def parse_steps(text: str) -> list[dict]:
    """Recipe steps from lines like `Run the migrations @ manage.py:12` (numbering optional), or
    a step's JSON where `steps_text` wrote one."""
    steps = []
    for raw in text.splitlines():
        step = _step_from_line(raw, order=len(steps) + 1)
        if step is not None:
            steps.append(step)
    return steps


def _step_from_line(raw: str, *, order: int) -> dict | None:
    exact = _step_from_json(raw.strip())
    if exact is not None:
        return exact
    line = _STEP_NUMBER.sub("", raw).strip()
    if not line:
        return None
    step: dict = {"order": order, "description": line[:MAX_STEP_CHARS]}
    tail = _STEP_TAIL.search(line)
    if tail:
        step["description"] = line[: tail.start()].strip()[:MAX_STEP_CHARS]
        step["canonical_file"] = tail.group("file")
        if tail.group("line"):
            step["canonical_line"] = int(tail.group("line"))
    return step


def _step_from_json(line: str) -> dict | None:
    if not (line.startswith("{") and line.endswith("}")):
        return None
    try:
        return RecipeStep.model_validate_json(line).model_dump(exclude_none=True)
    except ValidationError:
        return None  # braces in a step's own words


def steps_text(steps: list[dict]) -> str:
    """The editable form of recipe steps, which `parse_steps` reads back to the same steps: one a
    line, `@ file:line` when a step names one, numbered when its words start like a number, and
    as the step's JSON when no plain line holds it (several lines, an `@` naming no file, edge
    spaces, an order out of sequence)."""
    return "\n".join(_step_line(step, order=position) for position, step in enumerate(steps, start=1))


def _step_line(step: dict, *, order: int) -> str:
    plain = step.get("description", "")
    if step.get("canonical_file"):
        plain += f" @ {step['canonical_file']}"
        if step.get("canonical_line"):
            plain += f":{step['canonical_line']}"
    exact = json.dumps(step, ensure_ascii=False).translate(_JSON_LINE_BREAKS)
    for line in (plain, f"{order}. {plain}", exact):
        if line.splitlines() == [line] and _step_from_line(line, order=order) == step:
            return line
    return plain


def _clean(text: str) -> str:
    return re.sub(r"[ \t]+", " ", text).strip()


@dataclass
class _Block:
    heading: str
    lines: list[str]
    numbered: bool = False


def _blocks(text: str) -> list[_Block]:
    """Bullets, numbered items and paragraphs, each with the heading it sits under. Indented
    lines continue the bullet above them; a fenced code block joins the block before it."""
    blocks: list[_Block] = []
    heading = ""
    current: _Block | None = None  # the block the next plain line continues
    previous: _Block | None = None  # the last block under this heading
    fence: _Block | None = None  # the block an open code fence writes into
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if fence is not None or _FENCE.match(raw):
            if fence is None:
                fence = previous or _Block(heading, [])
                if fence is not previous:
                    blocks.append(fence)
            elif _FENCE.match(raw):
                fence.lines.append(raw.strip())
                previous, fence, current = fence, None, None
                continue
            fence.lines.append(raw.rstrip())
            continue
        if not raw.strip():
            current = None
            continue
        title = _HEADING.match(raw)
        if title:
            heading = _clean(_without_closing_hashes(title.group(2)))
            current = previous = None
            continue
        bullet = _BULLET.match(raw)
        indented = raw[:1] in (" ", "\t")
        if bullet and len(bullet.group(1).expandtabs()) < 2:
            current = _Block(heading, [raw.strip()], numbered=bullet.group(2) is not None)
        elif indented and previous is not None and _BULLET.match(previous.lines[0]):
            previous.lines.append(raw.strip())
            current = previous
            continue
        elif current is not None:
            current.lines.append(raw.strip())
            continue
        else:
            current = _Block(heading, [raw.strip()])
        blocks.append(current)
        previous = current
    return blocks


def _block_text(block: _Block) -> str:
    lines = list(block.lines)
    if lines:
        lines[0] = _STEP_NUMBER.sub("", lines[0])
    return "\n".join(lines).strip()


def parse_rules(text: str, *, source_name: str = "", limit: int | None = MAX_RULES) -> list[Rule]:
    """The rules of a rules file, in order, each with a guessed type (at most `limit`)."""
    rules: list[Rule] = []
    recipe: Rule | None = None
    for block in _blocks(text):
        body = _block_text(block)
        if not body or (len(body) < 12 and not block.numbered):
            continue
        if block.numbered and block.heading and _RECIPE_HEADING.search(block.heading):
            if recipe is None or recipe.heading != block.heading:
                recipe = Rule(
                    type="workflow_recipe", content="", heading=block.heading, task_pattern=block.heading
                )
                rules.append(recipe)
            step_text = _clean(body.replace("\n", " "))
            recipe.steps.append({"order": len(recipe.steps) + 1, "description": step_text[:MAX_STEP_CHARS]})
            recipe.related_files = list(dict.fromkeys([*recipe.related_files, *mentioned_files(body)]))[:20]
            continue
        recipe = None
        content = body if not block.heading else f"{block.heading}: {body}"
        rules.append(
            Rule(
                type=guess_type(body, block.heading),
                content=content[:MAX_RULE_CHARS],
                heading=block.heading,
                related_files=mentioned_files(body),
            )
        )
    for rule in rules:
        if rule.type == "workflow_recipe":
            numbered = "\n".join(f"{s['order']}. {s['description']}" for s in rule.steps)
            rule.content = f"{rule.task_pattern}\n{numbered}"[:MAX_RULE_CHARS]
    return rules[:limit]


def recipe_from_text(text: str) -> tuple[str, list[dict]]:
    """(task pattern, steps) of a recipe written as a title line then one step per line."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "", []
    title = lines[0] if not _STEP_NUMBER.match(lines[0]) else ""
    body = lines[1:] if title else lines
    return _clean(title)[:300], parse_steps("\n".join(body))
