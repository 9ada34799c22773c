"""Methodology plugins: map a methodology's phases onto the six universal phases,
build its work-unit references, and say which stages relay memories to which.

The retrieval engine only ever sees universal phases; a project picks its methodology
(`Project.methodology`) and a session may name its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from apps.memories.kinds import NATIVE_PHASES

UNIVERSAL_PHASES = ("define", "implement", "validate", "refine", "explore", "reflect")


@dataclass(frozen=True)
class Relay:
    source: str
    target: str
    types: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plugin:
    id: str
    display_name: str
    phases: dict[str, str]
    levels: tuple[str, ...]  # names of the hierarchy levels, outermost first
    relays: tuple[Relay, ...] = field(default_factory=tuple)

    def map_phase(self, phase: str | None) -> str:
        key = (phase or "").strip().lower()
        if key in UNIVERSAL_PHASES:
            return key
        return self.phases.get(key, "explore")

    def work_unit_ref(self, hierarchy: list[str], label: str = "") -> dict:
        hierarchy = [str(h)[:100] for h in hierarchy if str(h).strip()][:10]
        if not label and hierarchy:
            label = " / ".join(
                f"{level.title()} {value}" for level, value in zip(self.levels, hierarchy, strict=False)
            )
        return {"methodology": self.id, "hierarchy": hierarchy, "label": label[:200]}

    def relays_from(self, stage: str) -> list[Relay]:
        return [r for r in self.relays if r.source == stage]


NATIVE = Plugin(
    id="native",
    display_name="Native (spec / subtask)",
    phases={**NATIVE_PHASES, "retrospective": "reflect"},
    levels=("spec", "subtask"),
    relays=(
        Relay("planner", "coder"),
        Relay("coder", "qa_reviewer"),
        Relay("qa_reviewer", "qa_fixer", ("error_pattern", "requirement")),
    ),
)

BMAD = Plugin(
    id="bmad",
    display_name="BMAD (epic / story)",
    phases={
        "analyst": "define",
        "pm": "define",
        "architect": "define",
        "story_creation": "define",
        "dev": "implement",
        "story_development": "implement",
        "qa": "validate",
        "story_acceptance": "validate",
        "sm": "reflect",
        "retrospective": "reflect",
        "research": "explore",
    },
    levels=("epic", "story", "task"),
    relays=(
        Relay("analyst", "architect"),
        Relay("architect", "dev"),
        Relay("dev", "qa"),
        Relay("qa", "sm", ("decision", "module_insight")),
    ),
)

TDD = Plugin(
    id="tdd",
    display_name="TDD (red / green / refactor)",
    phases={
        "red": "define",
        "green": "implement",
        "refactor": "refine",
        "assertion": "validate",
        "spike": "explore",
        "retrospective": "reflect",
    },
    levels=("feature", "cycle"),
    relays=(
        Relay("test_writer", "implementer"),
        Relay("implementer", "refactorer"),
    ),
)

PLUGINS = {plugin.id: plugin for plugin in (NATIVE, BMAD, TDD)}


def plugin_for(name: str | None) -> Plugin:
    return PLUGINS.get((name or "").strip().lower(), NATIVE)
