"""Parsing CLAUDE.md / AGENTS.md / .cursorrules into typed rules (pure)."""

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


def test_at_most_200_rules():
    text = "\n".join(f"- Always do thing number {i} carefully." for i in range(300))
    assert len(parse_rules(text)) == 200
