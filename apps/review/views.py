"""Dashboard pages of a project: the health dashboard (the project's home), the memory browser
and a memory's page with its actions, agent sessions and their session-end review, the module
map, workflow recipes, teach and import, ask, and connecting an agent.

Every page resolves the project through `project_page` (outsiders get 404, too-low roles 403)
and reads through `apps.review.selectors`; every write goes through services so history,
audit and live updates follow. With htmx an action answers with the memory's card; without
JavaScript it redirects back with a message.
"""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from memorysaas_client.connect import blocks as agent_blocks

from apps.insights.selectors import TOKENS_WINDOW_DAYS
from apps.insights.views import health_page_charts
from apps.memories import services as memory_services
from apps.memories.models import FeedbackKind, Memory, MemoryType
from apps.memories.onboarding import onboarding_for
from apps.memories.selectors import is_author, memories_visible, memory_propagations
from apps.observer.selectors import session_in_project
from apps.review import answering, health, selectors, services
from apps.review.forms import (
    AskForm,
    CorrectionForm,
    FilterForm,
    ImportForm,
    RecipeForm,
    TeachForm,
    scope_choices,
    split_list,
)
from apps.review.rules_import import MAX_RULES, Rule, parse_rules, recipe_from_text, steps_text
from apps.tenants import services as tenant_services
from apps.tenants.dashboard import posted_text, project_page
from apps.tenants.models import OnboardingSurface
from apps.tenants.roles import Perm
from memorysaas.kernel.errors import ApiError

PER_PAGE = 30
SESSIONS_PER_PAGE = 25
MAX_PAGE = 10_000
SEARCH_LIMIT = 40
# The teach page holds two forms; the import form's fields (and their ids) carry this prefix so
# a label of one never checks a radio of the other, and the preview posts them back under it.
IMPORT_PREFIX = "import"
# On the dev set (MiniLM, contextual text) 7% of relevant memories score below 0.2 and half of
# the unrelated ones, all about the same codebase, score above 0.19: a floor, not a filter.
ASK_MIN_COSINE = 0.2
# A memory close in meaning but under the floor still answers when it holds the question's terms
# at least half as well as an ideal match would (`components.keyword`); a shared word alone
# ("setup", "settings") is not an answer.
ASK_NEAR_COSINE = 0.1
ASK_MIN_KEYWORD = 0.5
ASK_LIMIT = 8
MODE_PATHS = {"hybrid": ("dense", "keyword", "graph"), "keyword": ("keyword",), "semantic": ("dense",)}


def _url(name: str, project, *args) -> str:
    return reverse(name, args=[project.organization.slug, project.slug, *args])


def _can(request, project, permission: str) -> bool:
    return request.principal.has(project.organization_id, permission)


def _require(request, project, permission: str) -> None:
    if not _can(request, project, permission):
        raise PermissionDenied


# ---------------------------------------------------------------- health (the project's home)


@project_page(Perm.MEMORIES_READ)
@require_GET
def health_dashboard(request, project):
    principal = request.principal
    totals = selectors.project_totals(principal=principal, project=project)
    score = health.health_score(totals)
    rows, _depth = selectors.modules(principal=principal, project=project)
    top = [row for row in rows if row.memories][:8]
    largest = max((row.memories for row in top), default=0)
    return render(
        request,
        "review/health.html",
        {
            "project": project,
            "totals": totals,
            "score": score,
            "grade": health.health_grade(score.score),
            "modules": [(row, health.bar_width(row.memories, largest)) for row in top],
            "more_modules": max(0, len([r for r in rows if r.memories]) - len(top)),
            "attention": selectors.needs_attention(principal=principal, project=project),
            "tokens_window_days": TOKENS_WINDOW_DAYS,
            "active_days": health.ACTIVE_DAYS,
            "chars_per_token": health.CHARS_PER_TOKEN,
            "welcome": onboarding_for(
                principal=principal, project=project, surface=OnboardingSurface.DASHBOARD
            ),
            **health_page_charts(project),
        },
    )


# ---------------------------------------------------------------- browser


def _filters(values: dict) -> selectors.BrowseFilters:
    fields = selectors.BrowseFilters.__dataclass_fields__
    return selectors.BrowseFilters(
        **{name: values.get(name) or (None if name in ("since", "until") else "") for name in fields}
    )


@project_page(Perm.MEMORIES_READ)
@require_GET
def memory_browser(request, project):
    from apps.memories.search import SearchRequest, Stages, search

    principal = request.principal
    form = FilterForm(
        request.GET or None, methodologies=selectors.methodologies(principal=principal, project=project)
    )
    values = form.values() if request.GET else {}
    filters = _filters(values)
    depth = selectors.module_depth(principal=principal, project=project) if filters.module else 1
    qs = selectors.memories_filtered(principal=principal, project=project, filters=filters, depth=depth)
    query = (values.get("q") or "").strip()
    mode = values.get("mode") or "hybrid"
    page = values.get("page") or 1
    hits: dict[str, object] = {}
    has_next = False
    total = 0
    if query:
        result = search(
            SearchRequest(
                principal=principal,
                project=project,
                query=query,
                limit=SEARCH_LIMIT,
                types=[filters.type] if filters.type else None,
            ),
            Stages(paths=MODE_PATHS[mode]),
        )
        hits = {str(hit.memory.id): hit for hit in result.hits if _answers(hit)}
        memories = selectors.memories_in_order(qs, list(hits))
    else:
        memories, has_next = selectors.memories_page(qs, page=page, per_page=PER_PAGE)
        # The list says how many there are in all ("30+" read as a count); one page needs no COUNT.
        total = qs.count() if has_next or page > 1 else len(memories)
    next_query = request.GET.copy()
    next_query["page"] = str(page + 1)
    newer_query = request.GET.copy()
    newer_query["page"] = str(page - 1)
    first_shown = (page - 1) * PER_PAGE + 1
    return render(
        request,
        "review/browser.html",
        {
            "project": project,
            "form": form,
            "filters": filters,
            "query": query,
            "mode": mode,
            "rows": [(memory, hits.get(str(memory.id))) for memory in memories],
            "page": page,
            "has_next": has_next,
            "next_query": next_query.urlencode(),
            "newer_query": newer_query.urlencode(),
            "total": total,
            "first_shown": first_shown,
            "last_shown": first_shown + len(memories) - 1,
            "project_empty": not memories and not filters.active and not query and page == 1,
        },
    )


# ---------------------------------------------------------------- one memory


@project_page(Perm.MEMORIES_READ)
@require_GET
def memory_detail(request, project, memory_id):
    from apps.governance.selectors import disputes_for_memory

    try:
        memory = selectors.memory_in_project(
            principal=request.principal, project=project, memory_id=memory_id
        )
    except Http404:
        if not request.htmx:
            raise
        # The page's live refresh after the memory went (deleted, or out of the reader's sight):
        # htmx swaps only a success, so a 404 would leave the memory on screen as if it were there.
        return render(request, "review/_memory_gone.html", {"project": project})
    session = session_in_project(project=project, session_id=memory.session_id) if memory.session_id else None
    history = list(selectors.memory_history(memory))
    feedback = list(selectors.memory_feedback(memory)[:50])
    propagations = memory_propagations(memory=memory, principal=request.principal)
    names = selectors.actor_names(
        project=project,
        labels=[v.changed_by for v in history]
        + [f.actor_label for f in feedback]
        + [p.actor_label for p in propagations],
    )
    return render(
        request,
        "review/memory_detail.html",
        {
            "project": project,
            "memory": memory,
            "history": [(version, names.get(version.changed_by, version.changed_by)) for version in history],
            "feedback": [
                (item, names.get(item.actor_label, item.actor_label), services.readable_note(item.note))
                for item in feedback
            ],
            "propagations": [
                (
                    change,
                    names.get(change.actor_label, change.actor_label),
                    _JUDGED.get(change.feedback_kind, change.feedback_kind),
                )
                for change in propagations
            ],
            "disputes": list(
                disputes_for_memory(principal=request.principal, memory=memory).select_related(
                    "project__organization"
                )[:20]
            ),
            "session": session,
            "relations": selectors.memory_relations(
                principal=request.principal, project=project, memory=memory
            ),
            "steps": sorted(memory.payload.get("steps", []), key=lambda s: s.get("order", 0))
            if memory.type == MemoryType.WORKFLOW_RECIPE
            else [],
        },
    )


# What the feedback that moved a related memory's confidence did, in words.
_JUDGED = {
    FeedbackKind.CONFIRM: "confirmed",
    FeedbackKind.HELPFUL: "marked helpful",
    FeedbackKind.FLAG: "flagged",
    FeedbackKind.DISPUTE: "disputed",
}


def _memory(request, project, memory_id) -> Memory:
    return selectors.memory_in_project(principal=request.principal, project=project, memory_id=memory_id)


def _back(request, project, memory: Memory | None) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    base = _url("project_home", project)
    if target.startswith(base) and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}
    ):
        return target
    return (
        _url("memory_detail", project, memory.id) if memory is not None else _url("memory_browser", project)
    )


def _card(request, project, memory_id, *, extra_headers: dict | None = None):
    """The memory's card again (htmx swaps it in place)."""
    memory = selectors.memory_in_project(principal=request.principal, project=project, memory_id=memory_id)
    response = render(
        request,
        "review/_memory_card.html",
        {
            "project": project,
            "memory": memory,
            "where": request.POST.get("context", "list"),
            "next": request.POST.get("next", ""),
        },
    )
    for name, value in (extra_headers or {}).items():
        response[name] = value
    return response


def _done(request, project, memory: Memory, message: str, **headers):
    if request.htmx:
        # Aimed at <body>: the element that asked may have been swapped out with its card.
        trigger = {"close-dialog": {"target": "body"}, "toast": {"target": "body", "value": message}}
        return _card(
            request,
            project,
            memory.id,
            extra_headers={"HX-Trigger-After-Settle": json.dumps(trigger), **headers},
        )
    messages.success(request, message)
    return redirect(_back(request, project, memory))


def _refused(request, project, memory: Memory, message: str):
    """The action changed nothing: the card as it was, or back where it came from, saying why."""
    if request.htmx:
        trigger = {"toast": {"target": "body", "value": message}}
        return _card(
            request, project, memory.id, extra_headers={"HX-Trigger-After-Settle": json.dumps(trigger)}
        )
    messages.error(request, message)
    return redirect(_back(request, project, memory))


@project_page(Perm.MEMORIES_WRITE)
@require_POST
def memory_confirm(request, project, memory_id):
    memory = _memory(request, project, memory_id)
    memory_services.memory_feedback(memory=memory, actor=request.principal, kind=FeedbackKind.CONFIRM)
    return _done(request, project, memory, "Memory confirmed.")


@project_page(Perm.MEMORIES_WRITE)
@require_POST
def memory_flag(request, project, memory_id):
    memory = _memory(request, project, memory_id)
    try:
        note = posted_text(request, "note")[:2000]
    except ApiError as exc:
        return _refused(request, project, memory, exc.message)
    memory_services.memory_feedback(memory=memory, actor=request.principal, kind=FeedbackKind.FLAG, note=note)
    return _done(
        request, project, memory, "Flagged as wrong: its confidence dropped and it waits for review."
    )


@project_page(Perm.MEMORIES_REVIEW)
@require_POST
def memory_pin(request, project, memory_id):
    memory = _memory(request, project, memory_id)
    memory = services.memory_pin_toggle(memory=memory, actor=request.principal)
    return _done(request, project, memory, "Pinned: it never decays." if memory.pinned else "Unpinned.")


@project_page(Perm.MEMORIES_WRITE)
@require_http_methods(["GET", "POST"])
def memory_correct(request, project, memory_id):
    memory = _memory(request, project, memory_id)
    form = CorrectionForm(request.POST or None, initial={"content": memory.content})
    if request.method == "POST" and form.is_valid():
        try:
            result = services.memory_correct(
                memory=memory,
                actor=request.principal,
                reason=form.cleaned_data["reason"],
                content=form.cleaned_data["content"],
                note=form.cleaned_data["note"],
                may_deprecate=_can(request, project, Perm.MEMORIES_REVIEW),
            )
        except ApiError as exc:
            form.add_error("content" if "content" in str(exc.details) else None, exc.message)
        else:
            text = {
                "corrected": "Corrected: a new version is saved and the old text kept in its history.",
                "deprecated": "Marked as outdated: agents no longer receive it.",
                "flagged": "Flagged for a steward to retire: it waits for review.",
            }[result.outcome]
            return _done(request, project, result.memory, text)
    context = {
        "project": project,
        "memory": memory,
        "form": form,
        "next": _back(request, project, memory),
        "where": request.POST.get("context") or request.GET.get("context") or "list",
    }
    if request.htmx:
        response = render(request, "review/_correct_form.html", {**context, "in_dialog": True})
        if request.method == "POST":
            response["HX-Retarget"] = "#dialog-body"
            response["HX-Reswap"] = "innerHTML"
        return response
    return render(request, "review/memory_correct.html", context, status=422 if form.errors else 200)


@project_page(Perm.MEMORIES_WRITE)
@require_http_methods(["GET", "POST"])
def memory_delete(request, project, memory_id):
    memory = _memory(request, project, memory_id)
    if not is_author(principal=request.principal, memory=memory):
        _require(request, project, Perm.MEMORIES_REVIEW)
    if request.method == "GET":
        return render(
            request,
            "review/memory_delete.html",
            {"project": project, "memory": memory, "next": _back(request, project, None)},
        )
    memory_services.memory_delete(memory=memory, actor=request.principal)
    message = "Memory deleted."
    if request.htmx:
        if request.POST.get("context") == "detail":
            messages.success(request, message)
            response = render(request, "review/_empty.html")
            response["HX-Redirect"] = _url("memory_browser", project)
            return response
        response = render(request, "review/_empty.html")
        response["HX-Trigger-After-Settle"] = json.dumps({"toast": {"target": "body", "value": message}})
        return response
    messages.success(request, message)
    target = _back(request, project, None)
    return redirect(target if str(memory_id) not in target else _url("memory_browser", project))


@project_page(Perm.MEMORIES_WRITE)
@require_POST
def memory_reject(request, project, memory_id):
    memory = _memory(request, project, memory_id)
    try:
        note = posted_text(request, "note")[:2000]
    except ApiError as exc:
        return _refused(request, project, memory, exc.message)
    result = services.memory_reject(
        memory=memory,
        actor=request.principal,
        may_deprecate=_can(request, project, Perm.MEMORIES_REVIEW),
        note=note,
    )
    text = {
        "deprecated": "Rejected: agents no longer receive it. Restore brings it back.",
        "flagged": "Flagged as wrong: a steward decides whether to retire it.",
    }[result.outcome]
    return _done(request, project, result.memory, text)


@project_page(Perm.MEMORIES_WRITE)
@require_POST
def memory_embed_retry(request, project, memory_id):
    memory = _memory(request, project, memory_id)
    if memory.embedding_status != "failed":
        return _refused(request, project, memory, "Its embedding has not failed: nothing to retry.")
    memory = memory_services.memory_embed_retry(memory=memory, actor=request.principal)
    if memory.embedding_status == "ready":
        return _done(request, project, memory, "Embedded: semantic search finds it again.")
    if memory.embedding_status == "failed":
        return _refused(request, project, memory, f"The embedding failed again: {memory.embedding_error}")
    return _done(request, project, memory, "Queued: its embedding is being computed again.")


@project_page(Perm.MEMORIES_REVIEW)
@require_POST
def memory_restore(request, project, memory_id):
    memory = _memory(request, project, memory_id)
    if not memory.deprecated:
        return _done(request, project, memory, "It is not retired: nothing to restore.")
    memory = services.memory_restore(memory=memory, actor=request.principal)
    return _done(request, project, memory, "Restored: agents receive it again once it is reviewed.")


# ---------------------------------------------------------------- sessions


def _page_number(request) -> int:
    try:
        return min(MAX_PAGE, max(1, int(request.GET.get("page", "1"))))
    except ValueError:
        return 1


@project_page(Perm.MEMORIES_READ)
@require_GET
def sessions(request, project):
    page = _page_number(request)
    rows, has_next = selectors.sessions_page(
        principal=request.principal, project=project, page=page, per_page=SESSIONS_PER_PAGE
    )
    return render(
        request,
        "review/sessions.html",
        {"project": project, "rows": rows, "page": page, "has_next": has_next},
    )


def _session_review_page(request, project, session):
    review = selectors.session_review(principal=request.principal, project=project, session=session)
    return render(
        request,
        "review/session_review.html",
        {
            "project": project,
            "session": session,
            "review": review,
            "can_write": _can(request, project, Perm.MEMORIES_WRITE),
            "summary_mode": _summary_mode(project),
        },
    )


def _summary_mode(project) -> str:
    """How much of a session's summary the review shows at the project's trust level:
    everything up to Standard, only what needs review at Confident (the rest folded),
    nothing unless asked at Autonomous."""
    from apps.governance.models import TrustLevel
    from apps.governance.trust import current_level

    level = current_level(project)
    if level == TrustLevel.AUTONOMOUS:
        return "suppressed"
    if level == TrustLevel.CONFIDENT:
        return "condensed"
    return "full"


@project_page(Perm.MEMORIES_READ)
@require_GET
def session_review(request, project, session_id):
    session = selectors.session_in_project(project=project, session_id=session_id)
    return _session_review_page(request, project, session)


@project_page(Perm.MEMORIES_WRITE)
@require_POST
def session_confirm_all(request, project, session_id):
    session = selectors.session_in_project(project=project, session_id=session_id)
    pending = list(selectors.session_pending(principal=request.principal, project=project, session=session))
    count, left = services.memories_confirm_all(
        memories=pending, actor=request.principal, session_id=str(session.id)
    )
    message = (
        f"Confirmed {count} memor{'y' if count == 1 else 'ies'} from this session."
        if count
        else "Nothing from this session was waiting for review."
        if not left
        else "Nothing confirmed."
    )
    if left:
        message += f" {left} held a secret and wait{'s' if left == 1 else ''} for a steward."
    if request.htmx:
        response = _session_review_page(request, project, session)
        response["HX-Trigger-After-Settle"] = json.dumps({"toast": {"target": "body", "value": message}})
        return response
    messages.success(request, message)
    return redirect(_url("session_review", project, session.id))


# ---------------------------------------------------------------- module map


@project_page(Perm.MEMORIES_READ)
@require_GET
def module_map(request, project):
    rows, depth = selectors.modules(principal=request.principal, project=project)
    largest = max((row.memories for row in rows), default=0)
    return render(
        request,
        "review/modules.html",
        {
            "project": project,
            "modules": [(row, health.bar_width(row.memories, largest)) for row in rows],
            "graph_indexed": any(row.files_total for row in rows),
            "depth": depth,
            "index_job": selectors.latest_index_job(project=project),
        },
    )


# ---------------------------------------------------------------- workflow recipes


def _recipe(request, project, recipe_id) -> Memory:
    memory = _memory(request, project, recipe_id)
    if memory.type != MemoryType.WORKFLOW_RECIPE:
        from django.http import Http404

        raise Http404("No such recipe.")
    return memory


@project_page(Perm.MEMORIES_READ)
@require_GET
def recipes(request, project):
    items = list(selectors.workflow_recipes(principal=request.principal, project=project)[:200])
    return render(
        request,
        "review/recipes.html",
        {"project": project, "recipes": items, "can_write": _can(request, project, Perm.MEMORIES_WRITE)},
    )


@project_page(Perm.MEMORIES_READ)
@require_GET
def recipe_detail(request, project, recipe_id):
    memory = _recipe(request, project, recipe_id)
    steps = sorted(memory.payload.get("steps", []), key=lambda s: s.get("order", 0))
    return render(
        request, "review/recipe_detail.html", {"project": project, "memory": memory, "steps": steps}
    )


def _recipe_form(request, project, memory: Memory | None = None):
    """Add (memory None) or edit a recipe; an edit is a new version, the history keeps the old."""
    initial = None
    if memory is not None:
        initial = {
            "task_pattern": memory.payload.get("task_pattern", ""),
            "steps": steps_text(memory.payload.get("steps", [])),
            "content": memory.content,
            "tags": ", ".join(memory.tags),
        }
    form = RecipeForm(request.POST or None, project=project, editing=memory is not None, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            saved = services.recipe_save(
                project=project,
                actor=request.principal,
                task_pattern=data["task_pattern"],
                steps=data["steps"],
                content=data["content"],
                scope=data.get("scope", "project"),
                tags=data["tags"],
                memory=memory,
            )
        except ApiError as exc:
            form.add_error(None, _error_text(exc))
        else:
            messages.success(
                request,
                "Recipe updated; the previous version is kept in its history."
                if memory is not None
                else "Recipe saved. Agents planning this kind of task will receive it.",
            )
            return redirect(_url("recipe_detail", project, saved.id))
    return render(
        request,
        "review/recipe_form.html",
        {"project": project, "form": form, "memory": memory},
        status=422 if form.errors else 200,
    )


@project_page(Perm.MEMORIES_WRITE)
@require_http_methods(["GET", "POST"])
def recipe_new(request, project):
    return _recipe_form(request, project)


@project_page(Perm.MEMORIES_WRITE)
@require_http_methods(["GET", "POST"])
def recipe_edit(request, project, recipe_id):
    return _recipe_form(request, project, _recipe(request, project, recipe_id))


def _error_text(exc: ApiError) -> str:
    details = exc.details if isinstance(exc.details, list) else []
    return " ".join([exc.message, *[str(d) for d in details]])


# ---------------------------------------------------------------- teach and import


@project_page(Perm.MEMORIES_WRITE)
@require_http_methods(["GET", "POST"])
def teach(request, project):
    initial = {"related_files": request.GET.get("file", "")}
    form = TeachForm(request.POST or None, project=project, initial=initial)
    same = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        visible = memories_visible(principal=request.principal, project=project).active()
        same = visible.filter(content=data["content"].strip()).first()
        if same is not None:  # taught twice: agents would get the same text twice
            form.add_error("content", "This project already remembers exactly this.")
        else:
            try:
                memory = services.memory_teach(
                    project=project,
                    actor=request.principal,
                    memory_type=data["type"],
                    content=data["content"],
                    scope=data["scope"],
                    related_files=data["related_files"],
                    related_modules=data["related_modules"],
                    tags=data["tags"],
                )
            except ApiError as exc:
                form.add_error(None, _error_text(exc))
            else:
                if memory.secrets_redacted:
                    messages.warning(
                        request,
                        "Taught, with a secret replaced by its marker: agents receive the redacted text, "
                        "and the memory is marked for a steward's review.",
                    )
                else:
                    messages.success(request, "Taught. Agents receive it from their next context request.")
                return redirect(_url("memory_detail", project, memory.id))
    return render(
        request,
        "review/teach.html",
        {
            "project": project,
            "form": form,
            "import_form": ImportForm(project=project, prefix=IMPORT_PREFIX),
            "same": same,
        },
        status=422 if form.errors else 200,
    )


def _posted_rules(post) -> list[Rule]:
    """The rules of the preview table the person chose to keep, as they left them."""
    rules = []
    count = min(int(post.get("rule_count", "0") or 0), 500)
    for index in range(count):
        prefix = f"rule-{index}-"
        if not post.get(f"{prefix}include"):
            continue
        memory_type = post.get(f"{prefix}type", "")
        content = post.get(f"{prefix}content", "").strip()
        files = split_list(post.get(f"{prefix}files", ""), limit=100, item_chars=500)
        rule = Rule(
            type=memory_type,
            content=content,
            heading=post.get(f"{prefix}heading", "")[:200],
            related_files=files,
        )
        if memory_type == MemoryType.WORKFLOW_RECIPE:
            rule.task_pattern, rule.steps = recipe_from_text(content)
        rules.append(rule)
    return rules


@project_page(Perm.MEMORIES_WRITE)
@require_http_methods(["GET", "POST"])
def teach_import(request, project):
    if request.method == "GET":
        return redirect(_url("teach", project) + "#import")
    if request.POST.get("action") == "save":
        source_name = request.POST.get(f"{IMPORT_PREFIX}-source_name", "rules")[:40]
        scope = request.POST.get(f"{IMPORT_PREFIX}-scope", "")
        try:
            if scope not in dict(scope_choices(project)):
                raise ApiError(422, "Choose who sees the imported memories.")
            rules = _posted_rules(request.POST)
            if not rules:
                raise ApiError(422, "Choose at least one rule to import.")
            # As teach does: what the project already remembers word for word (a file imported
            # twice, a rule written twice) would reach agents twice.
            known = set(
                memories_visible(principal=request.principal, project=project)
                .active()
                .filter(content__in=[r.content for r in rules if "\x00" not in r.content])  # (refused below)
                .values_list("content", flat=True)
            )
            fresh = list({rule.content: rule for rule in rules if rule.content not in known}.values())
            skipped = len(rules) - len(fresh)
            created = (
                services.rules_import(
                    project=project,
                    actor=request.principal,
                    rules=fresh,
                    source_name=source_name,
                    scope=scope,
                )
                if fresh
                else []
            )
        except (ApiError, ValueError, ValidationError) as exc:
            text = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
            messages.error(request, _error_text(exc) if isinstance(exc, ApiError) else text)
            return redirect(_url("teach", project) + "#import")
        note = f" {skipped} the project already remembered (or repeated) were left out." if skipped else ""
        messages.success(request, f"Imported {len(created)} memories from {source_name}.{note}")
        return redirect(_url("memory_browser", project) + "?source=user_taught")
    form = ImportForm(request.POST, request.FILES, project=project, prefix=IMPORT_PREFIX)
    if not form.is_valid():
        return render(
            request,
            "review/teach.html",
            {"project": project, "form": TeachForm(project=project), "import_form": form},
            status=422,
        )
    rules = parse_rules(form.cleaned_data["text"], source_name=form.cleaned_data["source_name"], limit=None)
    return render(
        request,
        "review/import_preview.html",
        {
            "project": project,
            "rules": rules[:MAX_RULES],
            "left_out": max(len(rules) - MAX_RULES, 0),
            "max_rules": MAX_RULES,
            "source_name": form.cleaned_data["source_name"],
            "scope": form.cleaned_data["scope"],
            "scope_label": dict(form.fields["scope"].choices)[form.cleaned_data["scope"]],
            "prefix": IMPORT_PREFIX,
            "types": MemoryType.choices,
        },
    )


# ---------------------------------------------------------------- ask


@project_page(Perm.MEMORIES_READ)
@require_GET
def ask(request, project):
    from apps.memories.search import SearchRequest, search

    form = AskForm(request.GET or None)
    result = answer = None
    if request.GET and form.is_valid():
        result = search(
            SearchRequest(
                principal=request.principal, project=project, query=form.cleaned_data["q"], limit=ASK_LIMIT
            )
        )
        result.hits = [hit for hit in result.hits if _answers(hit)]
        answer = answering.written_answer(
            form.cleaned_data["q"],
            [
                answering.Cited(str(h.memory.id), h.citation, h.memory.type, h.memory.content)
                for h in result.hits
            ],
        )
    return render(
        request, "review/ask.html", {"project": project, "form": form, "result": result, "answer": answer}
    )


def _answers(hit) -> bool:
    """Whether a search hit is worth showing as an answer: it is close in meaning, or near and
    holding the question's terms. Search itself always fills its limit; a person asking a
    question should not be shown unrelated memories as answers. (Without the dense path, as in
    the browser's keyword mode, what the keyword path found is what there is.)"""
    cosine = hit.components.get("cosine")
    if cosine is None:
        return hit.ranks.get("keyword") is not None
    keyword = hit.components.get("keyword") or 0.0
    return cosine >= ASK_MIN_COSINE or (cosine >= ASK_NEAR_COSINE and keyword >= ASK_MIN_KEYWORD)


# ---------------------------------------------------------------- connect an agent


# What a key made for an agent carries: reading memories and context (hooks' answers, MCP
# search), writing them (`remember`, feedback, the page's "record a memory" example) and sending
# the agent's sessions (the hooks). Limited to the project, so no snippet needs a project id.
AGENT_KEY_SCOPES = (Perm.MEMORIES_READ, Perm.MEMORIES_WRITE, Perm.OBSERVER_WRITE)


@project_page(Perm.MEMORIES_READ)
@require_http_methods(["GET", "POST"])
def connect(request, project):
    """The blocks to paste for each agent, for this server's address; an admin can make the
    agent's key here (POST), shown once in the `export` line."""
    new_key = None
    if request.method == "POST":
        _require(request, project, Perm.ADMIN)
        _, new_key = tenant_services.api_key_create(
            organization=project.organization,
            actor=request.principal,
            name=f"Agent: {project.name}"[:120],
            scopes=AGENT_KEY_SCOPES,
            project=project,
        )
    server = request.build_absolute_uri("/").rstrip("/")
    response = render(
        request,
        "review/connect.html",
        {
            "project": project,
            "can_make_keys": _can(request, project, Perm.ADMIN),
            "agent_scopes": AGENT_KEY_SCOPES,
            "new_key": new_key,
            "server": server,
            "blocks": agent_blocks(server, str(project.id)),
        },
    )
    if new_key:
        response["Cache-Control"] = "no-store"  # (the secret is in this one response)
    return response
