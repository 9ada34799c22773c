"""Parsing CLAUDE.md / AGENTS.md / .cursorrules into typed rules (pure)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.memories.payloads import validate_payload
from apps.review.rules_import import (
    guess_type,
    mentioned_files,
    parse_rules,
    parse_steps,
    recipe_from_text,
    steps_text,
)

CLAUDE_MD = """# Project rules

Use Django 5.2 and Python 3.11 everywhere in this repo.

## Conventions
- Always run `ruff check .` before committing.
- Never import from `apps/observer/models.py` outside the observer app;
  use its selectors instead.
- Services must take keyword-only arguments.

## Architecture
The retrieval pipeline lives in apps/memories/search.py and fuses three paths.

## Release
1. Bump the version in pyproject.toml
2. Run `make test`
3. Tag and push

## Testing
- If you see "connection refused" errors, start redis first.
```sh
redis-server --daemonize yes
```
"""


def test_each_rule_gets_a_type_from_its_words():
    rules = parse_rules(CLAUDE_MD, source_name="CLAUDE.md")
    kinds = [(rule.type, rule.content.split(":", 1)[0]) for rule in rules]
    assert kinds == [
        ("preference", "Project rules"),
        ("preference", "Conventions"),
        ("gotcha", "Conventions"),
        ("requirement", "Conventions"),
        ("module_insight", "Architecture"),
        (
            "workflow_recipe",
            "Release\n1. Bump the version in pyproject.toml\n2. Run `make test`\n3. Tag and push",
        ),
        ("error_pattern", "Testing"),
    ]


def test_a_wrapped_bullet_and_a_code_block_stay_with_their_rule():
    rules = parse_rules(CLAUDE_MD)
    assert rules[2].content.endswith("outside the observer app;\nuse its selectors instead.")
    assert rules[2].related_files == ["apps/observer/models.py"]
    assert "redis-server --daemonize yes" in rules[-1].content


def test_numbered_steps_under_a_how_to_heading_become_one_recipe():
    recipe = next(rule for rule in parse_rules(CLAUDE_MD) if rule.type == "workflow_recipe")
    assert recipe.task_pattern == "Release"
    assert [s["description"] for s in recipe.steps] == [
        "Bump the version in pyproject.toml",
        "Run `make test`",
        "Tag and push",
    ]
    assert recipe.related_files == ["pyproject.toml"]


def test_cursorrules_plain_lines():
    rules = parse_rules("You are an expert in TypeScript.\n\nPrefer functional components over classes.\n")
    assert [r.type for r in rules] == ["preference", "preference"]


def test_guess_type_and_files():
    assert guess_type("Do not call the API twice") == "gotcha"
    assert guess_type("We chose Postgres rather than MySQL") == "decision"
    assert guess_type("Anything", heading="Project structure") == "module_insight"
    assert mentioned_files("see `src/a.ts`, https://x.org/y.html and setup.cfg") == ["src/a.ts", "setup.cfg"]


def test_steps_round_trip_through_their_text_form():
    steps = parse_steps("1. Add the route @ apps/api.py:12\n- Write a test\n\n3) Update docs @ README.md")
    assert steps == [
        {"order": 1, "description": "Add the route", "canonical_file": "apps/api.py", "canonical_line": 12},
        {"order": 2, "description": "Write a test"},
        {"order": 3, "description": "Update docs", "canonical_file": "README.md"},
    ]
    assert parse_steps(steps_text(steps)) == steps
    assert recipe_from_text("Ship it\n1. Tag\n2. Push") == ("Ship it", parse_steps("Tag\nPush"))


TRICKY_STEPS = [
    [{"order": 1, "description": "Tell the team"}, {"order": 2, "description": "Ping @ team"}],
    [{"order": 1, "description": "Run the migrations\nthen restart the worker"}],
    [{"order": 1, "description": "2. Tag the release"}, {"order": 2, "description": "- not a bullet"}],
    [{"order": 1, "description": "1."}, {"order": 2, "description": "3)"}],
    [{"order": 1, "description": "  indented, with a trailing space "}],
    [{"order": 1, "description": "Open the settings", "canonical_line": 4}],
    [{"order": 1, "description": "Edit", "canonical_file": "my docs/the guide.md", "canonical_line": 3}],
    [{"order": 1, "description": "Edit", "canonical_file": "C:/repo/a.py:7"}],
    [{"order": 1, "description": "Edit", "canonical_file": ""}],
    [{"order": 1, "description": "Copy a.py:12 @ b.py", "canonical_file": "c.py", "canonical_line": 9}],
    [
        {"order": 3, "description": "Late"},
        {"order": 1, "description": "Early"},
        {"order": 3, "description": "Twin"},
    ],
    [{"order": 1, "description": '{"order": 1, "description": "a step as JSON"}'}],
    [{"order": 1, "description": "{not json"}, {"order": 2, "description": "{}"}],
    [{"order": 1, "description": "Breaks\u2028of\x85every\x0bkind\r\nand\x1cmore"}],
    [{"order": 1, "description": "Déployer l\u2019API @ équipe"}],
    [{"order": 1, "description": "x" * 500, "canonical_file": "f" * 500, "canonical_line": 10**9}],
]


@pytest.mark.parametrize("steps", TRICKY_STEPS)
def test_every_recipe_step_survives_its_text_form(steps):
    assert validate_payload("workflow_recipe", {"task_pattern": "t", "steps": steps})["steps"] == steps
    assert parse_steps(steps_text(steps)) == steps


def test_plain_steps_stay_plain_lines():
    steps = parse_steps("Add the route @ apps/api.py:12\nWrite a test\nUpdate docs @ README.md")
    assert steps_text(steps) == "Add the route @ apps/api.py:12\nWrite a test\nUpdate docs @ README.md"
    assert steps_text([{"order": 1, "description": "2. Tag"}]) == "1. 2. Tag"


_TRICKY_TEXT = st.text(
    st.one_of(
        st.sampled_from(' @:.)-*+{}"\\\n\r\t\x0b\x85\u2028é12'),
        st.characters(codec="utf-8", exclude_characters="\x00"),
    ),
    max_size=40,
)
_STEP = st.fixed_dictionaries(
    {"order": st.integers(1, 60), "description": _TRICKY_TEXT.filter(bool)},
    optional={"canonical_file": _TRICKY_TEXT, "canonical_line": st.integers(1, 10**6)},
)


@settings(derandomize=True, max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STEP, min_size=1, max_size=6))
def test_any_valid_steps_survive_their_text_form(steps):
    assert parse_steps(steps_text(steps)) == steps


def test_at_most_200_rules():
    text = "\n".join(f"- Always do thing number {i} carefully." for i in range(300))
    assert len(parse_rules(text)) == 200


def test_headings_and_step_tails_with_long_runs_of_spaces_parse_at_once():
    """`(.*?)\\s*#*\\s*$` backtracked cubically on a heading with a long run of spaces inside it
    (4,000 spaces: 97 s), and the step tail quadratically: one short line held a worker."""
    gap = " " * 20_000
    rules = parse_rules(f"# a{gap}b\n- Run the linter before pushing.\n")
    assert [r.heading for r in rules] == ["a b"]
    assert parse_steps(f"Run it{gap}@ manage.py:12") == [
        {"order": 1, "description": "Run it", "canonical_file": "manage.py", "canonical_line": 12}
    ]
    assert parse_steps(f"x{gap}@{gap}y z")[0]["description"].startswith("x")


@pytest.mark.parametrize(
    ("line", "heading"),
    [("## Setup ##", "Setup"), ("# C#", "C#"), ("### Deploy   #####   ", "Deploy"), ("#  Notes", "Notes")],
)
def test_a_headings_closing_hashes_go_but_its_own_stay(line, heading):
    assert parse_rules(f"{line}\n- Keep the build green.\n")[0].heading == heading


def test_a_secret_with_slashes_is_not_taken_for_a_related_file():
    """The rule's content was redacted, but the secret key also read as a path, and related_files
    kept it as it was."""
    (rule,) = parse_rules(
        "- Set AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY before deploying.\n"
    )
    assert not any("wJalrXUtnFEMI" in f for f in rule.related_files)
    assert mentioned_files("See app/models.py and docs/setup.md") == ["app/models.py", "docs/setup.md"]


def test_front_matter_is_not_a_rule_and_setext_headings_are_headings():
    """A Cursor .mdc file opens with YAML front matter; its fields were imported as a rule, and an
    underlined (setext) heading was read as a paragraph with a `====` line."""
    text = (
        "---\ndescription: Backend rules\nglobs: apps/**/*.py\nalwaysApply: true\n---\n"
        "Conventions\n===========\n\n- Always use keyword-only arguments in services.\n\n"
        "Testing\n-------\nNever mock the database in these tests.\n"
    )
    rules = parse_rules(text)
    assert [(r.heading, r.content) for r in rules] == [
        ("Conventions", "Conventions: Always use keyword-only arguments in services."),
        ("Testing", "Testing: Never mock the database in these tests."),
    ]


def test_html_comments_are_left_out():
    text = "<!-- Generated by a tool: do not edit by hand. -->\n\n- Prefer pathlib over os.path here.\n"
    assert [r.content for r in parse_rules(text)] == ["Prefer pathlib over os.path here."]


def test_a_fence_closes_only_with_its_own_kind_and_an_unclosed_one_runs_to_the_end():
    text = (
        "- Run the dev server with make run.\n"
        "```sh\nmake run\n~~~\n- not a rule: still inside the fence\n```\n"
        "- Always rebase before merging a branch.\n"
        "```\nunclosed code block\n- also code\n"
    )
    rules = parse_rules(text)
    assert [r.content.splitlines()[0] for r in rules] == [
        "Run the dev server with make run.",
        "Always rebase before merging a branch.",
    ]
    assert "- not a rule: still inside the fence" in rules[0].content
    assert rules[1].content.endswith("unclosed code block\n- also code")


def test_quotes_and_nested_lists_stay_whole():
    text = (
        "> Never push straight to main; open a pull request.\n\n"
        "- Keep migrations reversible:\n  - write a reverse function\n  - test it once\n"
    )
    assert [r.content for r in parse_rules(text)] == [
        "Never push straight to main; open a pull request.",
        "Keep migrations reversible:\n- write a reverse function\n- test it once",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "> " * 20_000 + "x",
        "- " * 20_000 + "x",
        "*" * 100_000,
        "[" * 50_000 + "a" + "]" * 50_000,
        "<!--" * 40_000,
        "`" * 100_000,
        "| a |\n|---|\n" + "| b |\n" * 20_000,
    ],
    ids=["quotes", "bullets", "emphasis", "brackets", "comments", "backticks", "table"],
)
def test_pathological_markdown_parses_without_error(text):
    assert isinstance(parse_rules(text), list)
