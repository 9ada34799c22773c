"""Turn an agent rules file (CLAUDE.md, AGENTS.md, .cursorrules) into typed memory drafts.

Pure: no Django. The file is read as CommonMark (markdown-it-py) after any YAML front matter;
each top-level bullet, paragraph, quote or table becomes one rule; a numbered list under a
how-to heading ("Release", "Setup", "Workflow", "How to …") becomes one workflow recipe with
its steps; a fenced code block joins the rule before it; HTML comments are skipped. Types come from the words a rule uses
(a rules file's lines become typed memories, not one blob), and the
person importing sees and can change every type in a preview before anything is saved.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from pydantic import ValidationError

from apps.memories import secrets_scan
from apps.memories.payloads import RecipeStep

MAX_RULES = 200
MAX_RULE_CHARS = 4000
MAX_STEP_CHARS = 500

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


# CommonMark (setext headings, fences closed only by their own kind, HTML blocks) plus tables.
_MARKDOWN = MarkdownIt("commonmark").enable("table")
# YAML front matter (Cursor's .mdc rules, many AGENTS.md files): `---` on the first line, closed by
# `---` or `...`. Not CommonMark's; read off before the parse.
_FRONT_MATTER_END = re.compile(r"^(?:---|\.\.\.)[ \t]*$")


def _without_front_matter(lines: list[str]) -> list[str]:
    """The lines with a leading front matter blanked (so the parser's line numbers still fit)."""
    if not lines or lines[0].rstrip() != "---":
        return lines
    for end in range(1, len(lines)):
        if _FRONT_MATTER_END.match(lines[end]):
            return [""] * (end + 1) + lines[end + 1 :]
    return lines  # never closed: a thematic break, not front matter


def _blocks(text: str) -> list[_Block]:
    """Top-level list items, paragraphs, quotes and tables, each with the heading it sits under
    and its source lines (a nested list stays with its item). A code block joins the block before
    it; HTML comments are left out."""
    lines = _without_front_matter(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    tokens = _MARKDOWN.parse("\n".join(lines))
    blocks: list[_Block] = []
    heading = ""
    previous: _Block | None = None  # the last block under this heading
    numbered = [False]  # whether each open list is ordered, outermost first
    for position, token in enumerate(tokens):
        if token.type in ("bullet_list_open", "ordered_list_open"):
            numbered.append(token.type == "ordered_list_open")
        elif token.type in ("bullet_list_close", "ordered_list_close"):
            numbered.pop()
        top = token.level == 0 or (token.type == "list_item_open" and token.level == 1)
        if not top or token.map is None:
            continue
        source = lines[token.map[0] : token.map[1]]
        if token.type == "heading_open":
            heading = _clean(tokens[position + 1].content)
            previous = None
        elif token.type in ("fence", "code_block"):
            code = [line.rstrip() for line in source]
            while code and not code[-1]:
                code.pop()
            if previous is None:
                previous = _Block(heading, [])
                blocks.append(previous)
            previous.lines.extend(code)
        elif token.type == "html_block" and token.content.lstrip().startswith("<!--"):
            continue
        elif token.type in (
            "paragraph_open",
            "list_item_open",
            "blockquote_open",
            "table_open",
            "html_block",
        ):
            if token.type == "blockquote_open":
                source = [re.sub(r"^\s{0,3}>\s?", "", line) for line in source]
            kept = [line.strip() for line in source if line.strip()]
            if kept:
                previous = _Block(heading, kept, numbered=token.type == "list_item_open" and numbered[-1])
                blocks.append(previous)
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
