"""Forms of the dashboard pages. Filters are lenient (an unknown value is ignored); write forms
are strict and hand clean values to `apps.review.services`."""

from __future__ import annotations

import re

from django import forms

from apps.memories.models import MemoryScope, MemorySource, MemoryType
from apps.memories.validation import MAX_CONTENT_CHARS
from apps.review.selectors import CONFIDENCE_BANDS
from apps.review.services import CorrectionReason

ANY = [("", "Any")]
SEARCH_MODES = [("hybrid", "Hybrid"), ("keyword", "Keyword"), ("semantic", "Semantic")]
REVIEW_CHOICES = [
    ("needs_review", "Needs review"),
    ("verified", "Verified"),
    ("disputed", "Disputed"),
    ("stale", "Stale"),
    ("pinned", "Pinned"),
    ("deprecated", "Deprecated"),
]
CONFIDENCE_CHOICES = [("high", "High (≥ 0.8)"), ("medium", "Medium (0.5–0.8)"), ("low", "Low (< 0.5)")]
assert {value for value, _ in CONFIDENCE_CHOICES} == set(CONFIDENCE_BANDS)
RULES_SOURCES = [("CLAUDE.md", "CLAUDE.md"), ("AGENTS.md", "AGENTS.md"), (".cursorrules", ".cursorrules")]
MAX_IMPORT_BYTES = 256 * 1024
TYPE_HELP = {
    "gotcha": "A trap: something that looks right and is not.",
    "decision": "A choice the team made, and why.",
    "preference": "A convention or style to follow.",
    "pattern": "How things are usually done here.",
    "requirement": "Something that must hold.",
    "error_pattern": "An error and its fix.",
    "module_insight": "What a module does and how it fits.",
    "dead_end": "An approach that was tried and failed.",
}


def split_list(value: str, *, limit: int, item_chars: int) -> list[str]:
    """Entries separated by newlines or commas, stripped, unique, order kept."""
    items = list(dict.fromkeys(part.strip() for part in re.split(r"[\n,]", value or "") if part.strip()))
    if len(items) > limit:
        raise forms.ValidationError(f"At most {limit} entries.")
    if any(len(item) > item_chars for item in items):
        raise forms.ValidationError(f"Each entry is at most {item_chars} characters.")
    return items


def scope_choices(project, *, personal: bool = True) -> list[tuple[str, str]]:
    labels = {
        MemoryScope.PERSONAL: "Personal — only you",
        MemoryScope.PROJECT: f"Project — everyone in {project.name}",
        MemoryScope.TEAM: "Team — every project of this project's team",
        MemoryScope.ORG: f"Organization — every project of {project.organization.name}",
    }
    allowed = [MemoryScope.PROJECT, MemoryScope.ORG]
    if project.team_id:
        allowed.insert(1, MemoryScope.TEAM)
    if personal:
        allowed.insert(0, MemoryScope.PERSONAL)
    return [(str(scope), labels[scope]) for scope in allowed]


class FilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=500, label="Search")
    mode = forms.ChoiceField(required=False, choices=SEARCH_MODES, label="Search mode")
    type = forms.ChoiceField(required=False, choices=ANY + list(MemoryType.choices))
    source = forms.ChoiceField(required=False, choices=ANY + list(MemorySource.choices))
    scope = forms.ChoiceField(required=False, choices=ANY + list(MemoryScope.choices))
    confidence = forms.ChoiceField(required=False, choices=ANY + CONFIDENCE_CHOICES)
    module = forms.CharField(required=False, max_length=300)
    methodology = forms.ChoiceField(required=False, choices=ANY)
    review = forms.ChoiceField(required=False, choices=[("", "Live"), *REVIEW_CHOICES])
    since = forms.DateField(
        required=False, label="Created from", widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        required=False, label="Created to", widget=forms.DateInput(attrs={"type": "date"})
    )
    page = forms.IntegerField(required=False, min_value=1, max_value=1000)

    def __init__(self, *args, methodologies: list[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["methodology"].choices = ANY + [(m, m) for m in methodologies]

    def values(self) -> dict:
        """The valid filters; an invalid one is dropped rather than failing the page."""
        self.is_valid()
        clean = getattr(self, "cleaned_data", {})
        return {name: clean.get(name) for name in self.fields if name not in self.errors}


class CorrectionForm(forms.Form):
    reason = forms.ChoiceField(
        choices=CorrectionReason.CHOICES, widget=forms.RadioSelect, label="What's wrong?"
    )
    content = forms.CharField(
        required=False,
        max_length=MAX_CONTENT_CHARS,
        widget=forms.Textarea(attrs={"rows": 5}),
        label="Corrected text",
        help_text="Required when the content is inaccurate or too specific; optional otherwise.",
    )
    note = forms.CharField(required=False, max_length=2000, label="Note (optional)")


class TeachForm(forms.Form):
    type = forms.ChoiceField(label="Type")
    content = forms.CharField(
        max_length=MAX_CONTENT_CHARS,
        widget=forms.Textarea(attrs={"rows": 5}),
        label="What should agents know?",
    )
    related_files = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "auth/tokens.py"}),
        label="Files",
        help_text="Repository paths, one per line or separated by commas.",
    )
    related_modules = forms.CharField(
        required=False, label="Modules", help_text="Optional, e.g. apps/memories."
    )
    tags = forms.CharField(required=False, label="Tags", help_text="Optional, separated by commas.")
    scope = forms.ChoiceField(label="Who sees it", widget=forms.RadioSelect)

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["type"].choices = [
            (value, f"{label} — {TYPE_HELP[value]}" if value in TYPE_HELP else label)
            for value, label in MemoryType.choices
            if value in TYPE_HELP
        ]
        self.fields["type"].initial = "gotcha"
        self.fields["scope"].choices = scope_choices(project)
        self.fields["scope"].initial = MemoryScope.PROJECT

    def clean_related_files(self) -> list[str]:
        return split_list(self.cleaned_data["related_files"], limit=100, item_chars=500)

    def clean_related_modules(self) -> list[str]:
        return split_list(self.cleaned_data["related_modules"], limit=50, item_chars=300)

    def clean_tags(self) -> list[str]:
        return split_list(self.cleaned_data["tags"], limit=30, item_chars=100)


class RecipeForm(forms.Form):
    task_pattern = forms.CharField(
        max_length=300, label="Task", help_text="The kind of task, e.g. “Add an API endpoint”."
    )
    steps = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8}),
        label="Steps",
        help_text="One step per line. Point at code with “@ path/to/file.py:42” at the end of a step. "
        "A step in braces holds what one line cannot (several lines, an @ naming no file): "
        "edit the text inside its quotes.",
    )
    content = forms.CharField(
        required=False,
        max_length=MAX_CONTENT_CHARS,
        widget=forms.Textarea(attrs={"rows": 3}),
        label="Summary",
        help_text="Optional; written from the steps when empty.",
    )
    tags = forms.CharField(required=False, label="Tags", help_text="Optional, separated by commas.")
    scope = forms.ChoiceField(label="Who sees it", widget=forms.RadioSelect)

    def __init__(self, *args, project, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["scope"].choices = scope_choices(project)
        self.fields["scope"].initial = MemoryScope.PROJECT
        if editing:
            del self.fields["scope"]

    def clean_steps(self) -> list[dict]:
        from apps.review.rules_import import parse_steps

        steps = parse_steps(self.cleaned_data["steps"])
        if not steps:
            raise forms.ValidationError("Write at least one step.")
        if len(steps) > 50:
            raise forms.ValidationError("At most 50 steps.")
        return steps

    def clean_tags(self) -> list[str]:
        return split_list(self.cleaned_data["tags"], limit=30, item_chars=100)


class ImportForm(forms.Form):
    source_name = forms.ChoiceField(choices=RULES_SOURCES, label="File kind")
    text = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 12}),
        label="Paste the file",
        max_length=MAX_IMPORT_BYTES,
    )
    upload = forms.FileField(required=False, label="…or upload it")
    scope = forms.ChoiceField(label="Who sees the imported memories", widget=forms.RadioSelect)

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["scope"].choices = scope_choices(project, personal=True)
        self.fields["scope"].initial = MemoryScope.PROJECT

    def clean(self):
        data = super().clean()
        upload = data.get("upload")
        if upload is not None:
            if upload.size > MAX_IMPORT_BYTES:
                raise forms.ValidationError(f"The file is larger than {MAX_IMPORT_BYTES // 1024} KB.")
            try:
                data["text"] = upload.read().decode("utf-8-sig")  # (an editor's byte-order mark goes)
            except UnicodeDecodeError:
                raise forms.ValidationError("The file is not UTF-8 text.") from None
        if not (data.get("text") or "").strip():
            raise forms.ValidationError("Paste the file's text or upload it.")
        return data


class AskForm(forms.Form):
    q = forms.CharField(max_length=2000, label="Ask what this project's memory knows")
