"""Reads for the dashboard. Every query starts from the memories that apply in the project for
the principal (`memories_visible`: the project's own, its personal ones only to their owner, its
team's and its organization's shared ones), so nothing here can reach another tenant."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from uuid import UUID

from django.db.models import Avg, BooleanField, Count, Q
from django.db.models.expressions import RawSQL
from django.http import Http404
from django.utils import timezone

from apps.insights.selectors import tokens_saved_total
from apps.memories.models import Memory, MemoryQuerySet, MemoryRelation, MemoryType
from apps.memories.selectors import memories_visible
from apps.observer.models import Session
from apps.review import health
from apps.tenants.models import Project
from apps.tenants.principal import Principal

CARD_RELATED = ("owner", "created_by_key", "project__organization", "usage_row")
CONFIDENCE_BANDS = {"high": (0.8, None), "medium": (0.5, 0.8), "low": (None, 0.5)}
REVIEW_STATES = {
    "needs_review": Q(needs_review=True),
    "verified": Q(user_verified=True),
    "disputed": Q(disputed=True),
    "stale": Q(stale_at__isnull=False),
    "pinned": Q(pinned=True),
    "deprecated": Q(deprecated=True),
}

# The module of each path, as `health.file_module` / `health.named_module` compute it.
_FILE_MODULE_SQL = (
    "CASE WHEN strpos(f, '/') = 0 THEN %s ELSE array_to_string("
    "(string_to_array(f, '/'))[1:least(%s, cardinality(string_to_array(f, '/')) - 1)], '/') END"
)
_NAMED_MODULE_SQL = (
    "array_to_string((string_to_array(CASE WHEN strpos(btrim(n, '/ '), '/') = 0 "
    "THEN replace(btrim(n, '/ '), '.', '/') ELSE btrim(n, '/ ') END, '/'))[1:%s], '/')"
)
_IN_MODULE_SQL = (
    f"EXISTS (SELECT 1 FROM unnest(memories_memory.related_files) AS f WHERE {_FILE_MODULE_SQL} = %s)"
    f" OR EXISTS (SELECT 1 FROM unnest(memories_memory.related_modules) AS n"
    f" WHERE btrim(n, '/ .') <> '' AND {_NAMED_MODULE_SQL} = %s)"
)


def project_memories(*, principal: Principal, project: Project) -> MemoryQuerySet:
    """The live (not deprecated) memories that apply in `project` for `principal`."""
    return memories_visible(principal=principal, project=project).active()


def memory_in_project(*, principal: Principal, project: Project, memory_id: UUID | str) -> Memory:
    """A memory that applies in `project` for `principal` (deprecated ones too); 404 otherwise —
    a memory of another tenant and one that does not exist look the same."""
    memory = (
        memories_visible(principal=principal, project=project)
        .select_related(*CARD_RELATED)
        .defer("embedding", "search_vector")
        .filter(id=memory_id)
        .first()
    )
    if memory is None:
        raise Http404("No such memory.")
    return memory


# ---------------------------------------------------------------- health


def project_totals(*, principal: Principal, project: Project, now: datetime | None = None) -> health.Totals:
    now = now or timezone.now()
    since = now - timedelta(days=health.ACTIVE_DAYS)
    row = project_memories(principal=principal, project=project).aggregate(
        total=Count("id"),
        active=Count("id", filter=Q(usage_row__access_count__gt=0, usage_row__last_accessed_at__gte=since)),
        needs_review=Count("id", filter=Q(needs_review=True)),
        disputed=Count("id", filter=Q(disputed=True)),
        stale=Count("id", filter=Q(stale_at__isnull=False)),
        verified=Count("id", filter=Q(user_verified=True)),
        mean_confidence=Avg("confidence"),
    )
    saved = tokens_saved_total(project=project)
    return health.Totals(
        total=row["total"],
        active=row["active"],
        needs_review=row["needs_review"],
        disputed=row["disputed"],
        stale=row["stale"],
        verified=row["verified"],
        mean_confidence=row["mean_confidence"] or 0.0,
        tokens_saved=saved["total"],
        tokens_saved_interval=saved["total_interval"],
    )


@dataclass
class Attention:
    stale: list[Memory]
    needs_review: list[Memory]
    disputed: list[Memory]

    def __bool__(self) -> bool:
        return bool(self.stale or self.needs_review or self.disputed)


def needs_attention(*, principal: Principal, project: Project, limit: int = 6) -> Attention:
    qs = project_memories(principal=principal, project=project).select_related(*CARD_RELATED)
    qs = qs.defer("embedding", "search_vector")
    return Attention(
        stale=list(qs.filter(stale_at__isnull=False).order_by("-stale_at")[:limit]),
        needs_review=list(qs.filter(needs_review=True).order_by("-created_at")[:limit]),
        disputed=list(qs.filter(disputed=True).order_by("-updated_at")[:limit]),
    )


def modules(*, principal: Principal, project: Project) -> tuple[list[health.ModuleRow], int]:
    """Module rows (largest first) and the grouping depth; see `health.module_rows`."""
    from apps.graph.selectors import file_paths

    rows = project_memories(principal=principal, project=project).values_list(
        "related_files", "related_modules", "needs_review", "type"
    )
    facts = (
        health.MemoryFacts(
            related_files=files,
            related_modules=names,
            needs_review=review,
            is_e2e=kind == MemoryType.E2E_OBSERVATION,
        )
        for files, names, review, kind in rows
    )
    return health.module_rows(facts, file_paths(project=project))


def module_depth(*, principal: Principal, project: Project) -> int:
    from apps.graph.selectors import file_paths

    paths = file_paths(project=project)
    if not paths:
        listed = project_memories(principal=principal, project=project).values_list(
            "related_files", flat=True
        )
        paths = [path for files in listed for path in files]
    return health.module_depth(paths)


# ---------------------------------------------------------------- browsing


@dataclass(frozen=True)
class BrowseFilters:
    type: str = ""
    source: str = ""
    scope: str = ""
    confidence: str = ""
    module: str = ""
    methodology: str = ""
    review: str = ""
    since: date | None = None
    until: date | None = None

    @property
    def active(self) -> bool:
        return any(getattr(self, name) for name in self.__dataclass_fields__)


def in_module(qs: MemoryQuerySet, module: str, depth: int) -> MemoryQuerySet:
    matches = RawSQL(
        _IN_MODULE_SQL, [health.ROOT_MODULE, depth, module, depth, module], output_field=BooleanField()
    )
    return qs.alias(in_module=matches).filter(in_module=True)


def memories_filtered(
    *, principal: Principal, project: Project, filters: BrowseFilters, depth: int = 1
) -> MemoryQuerySet:
    qs = memories_visible(principal=principal, project=project)
    qs = qs.filter(deprecated=filters.review == "deprecated")
    if filters.review in REVIEW_STATES:
        qs = qs.filter(REVIEW_STATES[filters.review])
    exact = {"type": filters.type, "source": filters.source, "scope": filters.scope}
    qs = qs.filter(**{name: value for name, value in exact.items() if value})
    if filters.methodology:
        qs = qs.filter(methodology=filters.methodology)
    if filters.confidence in CONFIDENCE_BANDS:
        low, high = CONFIDENCE_BANDS[filters.confidence]
        if low is not None:
            qs = qs.filter(confidence__gte=low)
        if high is not None:
            qs = qs.filter(confidence__lt=high)
    if filters.since:
        qs = qs.filter(created_at__gte=_day_start(filters.since))
    if filters.until and filters.until < date.max:  # (date.max: nothing is later)
        qs = qs.filter(created_at__lt=_day_start(filters.until + timedelta(days=1)))
    if filters.module:
        qs = in_module(qs, filters.module, depth)
    return qs


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def memories_page(qs: MemoryQuerySet, *, page: int, per_page: int) -> tuple[list[Memory], bool]:
    """One page, newest first, and whether there is another."""
    start = (page - 1) * per_page
    rows = list(
        qs.select_related(*CARD_RELATED)
        .defer("embedding", "search_vector")
        .order_by("-created_at", "-id")[start : start + per_page + 1]
    )
    return rows[:per_page], len(rows) > per_page


def memories_in_order(qs: MemoryQuerySet, ids: Sequence[str]) -> list[Memory]:
    """The memories of `qs` among `ids` (search hits), in the order of `ids`."""
    found = {
        str(m.id): m
        for m in qs.filter(id__in=list(ids)).select_related(*CARD_RELATED).defer("embedding", "search_vector")
    }
    return [found[i] for i in ids if i in found]


def methodologies(*, principal: Principal, project: Project) -> list[str]:
    return list(
        project_memories(principal=principal, project=project)
        .exclude(methodology="")
        .order_by("methodology")
        .values_list("methodology", flat=True)
        .distinct()
    )


# ---------------------------------------------------------------- one memory


def memory_history(memory: Memory):
    return memory.versions.all()


def memory_relations(
    *, principal: Principal, project: Project, memory: Memory
) -> list[tuple[MemoryRelation, bool]]:
    """The memory's relations, each with whether its target memory is one the principal may see
    here (a relation can point at a teammate's personal memory: it is named, not shown)."""
    relations = list(memory.relations.select_related("target_memory"))
    targets = [r.target_memory_id for r in relations if r.target_memory_id]
    visible = set(
        memories_visible(principal=principal, project=project)
        .filter(id__in=targets)
        .values_list("id", flat=True)
    )
    return [(r, r.target_memory_id in visible) for r in relations]


def memory_feedback(memory: Memory):
    return memory.feedback.select_related("actor_user")


def actor_names(*, project: Project, labels: Sequence[str]) -> dict[str, str]:
    """Readable names for history labels (`user:<pk>`, `api_key:<prefix>`, `system`), looked up
    among the project's organization only."""
    from apps.tenants.models import ApiKey
    from apps.tenants.selectors import members_for

    user_ids = [label.split(":", 1)[1] for label in labels if label.startswith("user:")]
    prefixes = [label.split(":", 1)[1] for label in labels if label.startswith("api_key:")]
    names: dict[str, str] = {"system": "the observer (system)"}
    members = members_for(organization=project.organization).filter(
        user_id__in=[i for i in user_ids if i.isdigit()]
    )
    names |= {f"user:{m.user_id}": m.user.display_name for m in members}
    keys = ApiKey.objects.for_org(project.organization).filter(prefix__in=prefixes)
    names |= {f"api_key:{k.prefix}": f"API key “{k.name}”" for k in keys}
    return names


def workflow_recipes(*, principal: Principal, project: Project) -> MemoryQuerySet:
    return (
        project_memories(principal=principal, project=project)
        .filter(type=MemoryType.WORKFLOW_RECIPE)
        .select_related(*CARD_RELATED)
        .defer("embedding", "search_vector")
        .order_by("-updated_at")
    )


# ---------------------------------------------------------------- sessions


@dataclass
class SessionRow:
    session: Session
    promoted: int
    needs_review: int


def sessions_page(
    *, principal: Principal, project: Project, page: int, per_page: int
) -> tuple[list[SessionRow], bool]:
    """One page of the project's sessions, newest first, each with how many memories it promoted
    and how many of those still wait for review; and whether there is another page."""
    from apps.observer.selectors import sessions_for

    start = (page - 1) * per_page
    rows = list(
        sessions_for(project=project)
        .select_related("user", "api_key")
        .defer("report", "edited_files", "work_unit")
        .order_by("-started_at", "-id")[start : start + per_page + 1]
    )
    has_next = len(rows) > per_page
    rows = rows[:per_page]
    promoted = {memory_id for row in rows for memory_id in row.promoted_memory_ids}
    pending = (
        set(
            project_memories(principal=principal, project=project)
            .filter(id__in=promoted, needs_review=True)
            .values_list("id", flat=True)
        )
        if promoted
        else set()
    )
    return [
        SessionRow(
            session=row,
            promoted=len(set(row.promoted_memory_ids)),
            needs_review=len(pending.intersection(row.promoted_memory_ids)),
        )
        for row in rows
    ], has_next


def session_in_project(*, project: Project, session_id: UUID | str) -> Session:
    """A session of `project`; 404 otherwise (another tenant's session looks missing)."""
    from apps.observer.selectors import session_in_project as find

    session = find(project=project, session_id=session_id)
    if session is None:
        raise Http404("No such session.")
    return session


@dataclass
class SessionReview:
    """What a session-end review shows: the memories injected into the session,
    the new ones waiting for review, those that needed none (auto-confirmed) or were confirmed
    since, existing memories the session reinforced, and new ones rejected since."""

    applied: list[Memory]
    pending: list[Memory]
    settled: list[Memory]
    reinforced: list[Memory]
    rejected: list[Memory]
    gone: int  # promoted, then deleted (or personal to someone else)


def session_pending(*, principal: Principal, project: Project, session: Session) -> MemoryQuerySet:
    """The live memories `session` promoted that still wait for review."""
    return project_memories(principal=principal, project=project).filter(
        id__in=session.promoted_memory_ids, needs_review=True
    )


def session_review(*, principal: Principal, project: Project, session: Session) -> SessionReview:
    ids = {*session.injected_memory_ids, *session.promoted_memory_ids, *session.reinforced_memory_ids}
    found = {
        memory.id: memory
        for memory in memories_visible(principal=principal, project=project)
        .filter(id__in=ids)
        .select_related(*CARD_RELATED)
        .defer("embedding", "search_vector")
    }

    def listed(memory_ids) -> list[Memory]:
        return [found[i] for i in dict.fromkeys(memory_ids) if i in found]

    promoted = listed(session.promoted_memory_ids)
    created = set(session.promoted_memory_ids)
    return SessionReview(
        applied=listed(session.injected_memory_ids),
        pending=[m for m in promoted if m.needs_review and not m.deprecated],
        settled=[m for m in promoted if not m.needs_review and not m.deprecated],
        reinforced=[m for m in listed(session.reinforced_memory_ids) if m.id not in created],
        rejected=[m for m in promoted if m.deprecated],
        gone=len(created) - len(promoted),
    )


def latest_index_job(*, project: Project):
    """The project's most recent knowledge-graph index job, or None (never indexed)."""
    from apps.graph.models import IndexJob

    return IndexJob.objects.filter(project=project).order_by("-created_at", "-id").first()
