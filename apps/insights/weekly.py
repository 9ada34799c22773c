"""The weekly synthesis: a project's week in a few paragraphs, for its dashboard and by email.

What it says comes from facts gathered here (memories learned, used most, disputed, dead ends
that were injected and so not walked into again, the A/B comparison so far). With an LLM
configured (OPENAI_API_KEY) the facts are written up by it; without one, or when the call
fails, a template writes them. Either way the facts are stored beside the text, so the page can
show exactly what the text was written from. Stewards, admins and owners are emailed unless
they opted out (SynthesisOptOut); the `insights.weekly` event goes to the organization's webhooks.
"""

from __future__ import annotations

import json
import logging
from datetime import date, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from apps.governance.models import Dispute
from apps.governance.notify import project_stewards
from apps.insights.history import SynthesisOptOut, WeeklySynthesis
from apps.insights.selectors import project_insights
from apps.insights.snapshots import day_bounds, project_memories
from apps.memories.models import MemoryType
from apps.tenants.models import Project, User
from memorysaas.kernel import events
from memorysaas.kernel.llm import chat_client, llm_configured

logger = logging.getLogger(__name__)

LIST_SIZE = 5
AB_DAYS = 28
PROMPT = (
    "You write the weekly memory report of a software team whose coding agents share a memory"
    " service. From the JSON facts, write 4 to 6 short plain-text paragraphs (no markdown headings,"
    " no invented numbers): what was learned, what was used most, what was disputed, which dead"
    " ends were avoided, and what the A/B comparison says so far (say plainly when there are not"
    " enough sessions or no clear difference). Quote memory texts briefly. Under 250 words."
)


def last_week(today: date | None = None) -> date:
    """The Monday of the last complete week."""
    today = today or timezone.localdate()
    return today - timedelta(days=today.weekday() + 7)


def _snippet(text: str, size: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= size else text[: size - 1] + "…"


def _injections(project: Project, start, end) -> dict[str, int]:
    """How often each memory was injected into the project's sessions started in the period."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT m, count(*) FROM observer_session s, unnest(s.injected_memory_ids) AS m
            WHERE s.project_id = %s AND s.started_at >= %s AND s.started_at < %s
            GROUP BY m ORDER BY count(*) DESC, m
            """,
            [str(project.id), start, end],
        )
        return {str(m): n for m, n in cursor.fetchall()}


def gather(project: Project, week_start: date) -> dict[str, Any]:
    start = day_bounds(week_start)[0]
    end = day_bounds(week_start + timedelta(days=6))[1]
    mine = project_memories(project)
    learned = mine.filter(created_at__gte=start, created_at__lt=end)
    by_type = dict(learned.values_list("type").annotate(n=Count("id")).order_by("-n"))
    injected = _injections(project, start, end)
    texts = {str(m.id): m for m in mine.filter(id__in=list(injected)).only("id", "content", "type")}
    used = [
        {"memory_id": mid, "text": _snippet(texts[mid].content), "injections": n}
        for mid, n in injected.items()
        if mid in texts
    ][:LIST_SIZE]
    dead_ends = [
        {"memory_id": mid, "text": _snippet(texts[mid].content), "injections": n}
        for mid, n in injected.items()
        if mid in texts and texts[mid].type == MemoryType.DEAD_END
    ][:LIST_SIZE]
    disputes = Dispute.objects.filter(project=project).filter(
        Q(created_at__gte=start, created_at__lt=end) | Q(resolved_at__gte=start, resolved_at__lt=end)
    )
    report = project_insights(
        project=project,
        date_from=week_start + timedelta(days=6 - AB_DAYS + 1),
        date_to=week_start + timedelta(days=6),
    )
    return {
        "week": {"from": week_start.isoformat(), "to": (week_start + timedelta(days=6)).isoformat()},
        "learned": {
            "count": sum(by_type.values()),
            "by_type": by_type,
            "examples": [
                {"memory_id": str(m.id), "type": m.type, "text": _snippet(m.content)}
                for m in learned.order_by("-confidence", "-created_at")[:LIST_SIZE]
            ],
        },
        "used_most": used,
        "disputed": {
            "opened": disputes.filter(created_at__gte=start, created_at__lt=end).count(),
            "resolved": disputes.filter(resolved_at__gte=start, resolved_at__lt=end).count(),
            "examples": [
                {
                    "memory_id": str(d.memory_id),
                    "text": _snippet(d.memory.content),
                    "reason": _snippet(d.reason),
                    "status": d.status,
                }
                for d in disputes.select_related("memory").order_by("-created_at")[:LIST_SIZE]
            ],
        },
        "dead_ends_avoided": {"count": sum(d["injections"] for d in dead_ends), "examples": dead_ends},
        "ab": {
            "period": report["period"],
            "groups": report["groups"],
            "metrics": [
                {
                    k: m[k]
                    for k in (
                        "key",
                        "label",
                        "effect",
                        "interval",
                        "n_control",
                        "n_full",
                        "enough",
                        "significant",
                    )
                }
                for m in report["metrics"]
            ],
        },
    }


def _list(items: list[dict], empty: str, fmt) -> str:
    return "\n".join(f"- {fmt(i)}" for i in items) if items else empty


def _effect(value: float, metric: dict[str, Any]) -> str:
    if metric.get("effect_kind") != "absolute":
        return f"{value:+.0%}"
    if metric.get("unit") == "rate":
        return f"{value * 100:+.0f} points"
    return f"{value:+.2f} {metric.get('unit') or ''}".rstrip()


def template_text(facts: dict[str, Any]) -> str:
    learned = facts["learned"]
    types = ", ".join(f"{n} {t.replace('_', ' ')}" for t, n in learned["by_type"].items())
    ab_lines = []
    for m in facts["ab"]["metrics"]:
        if not m["enough"] or m["effect"] is None or not m["interval"]:
            ab_lines.append(
                f"- {m['label']}: not enough sessions yet ({m['n_control']} control, {m['n_full']} full)."
            )
        else:
            lo, hi = m["interval"]
            verdict = "a clear difference" if m["significant"] else "no clear difference yet"
            ab_lines.append(
                f"- {m['label']}: {_effect(m['effect'], m)} against control"
                f" (95 % interval {_effect(lo, m)} to {_effect(hi, m)}), {verdict}."
            )
    disputed = facts["disputed"]
    parts = [
        f"Week of {facts['week']['from']} to {facts['week']['to']}.",
        f"Learned: {learned['count']} new memories"
        + (f" ({types})." if types else ".")
        + (
            "\n" + _list(learned["examples"], "", lambda i: f"[{i['type']}] {i['text']}")
            if learned["examples"]
            else ""
        ),
        "Used most:\n"
        + _list(
            facts["used_most"],
            "No memory was injected this week.",
            lambda i: f"{i['text']} ({i['injections']}×)",
        ),
        f"Disputed: {disputed['opened']} opened, {disputed['resolved']} resolved."
        + (
            "\n" + _list(disputed["examples"], "", lambda i: f"{i['text']} — {i['reason']} ({i['status']})")
            if disputed["examples"]
            else ""
        ),
        f"Dead ends avoided: {facts['dead_ends_avoided']['count']} injections of dead-end memories."
        + (
            "\n"
            + _list(facts["dead_ends_avoided"]["examples"], "", lambda i: f"{i['text']} ({i['injections']}×)")
            if facts["dead_ends_avoided"]["examples"]
            else ""
        ),
        "A/B so far (full memory against control):\n" + "\n".join(ab_lines),
    ]
    return "\n\n".join(parts)


def llm_text(facts: dict[str, Any]) -> str | None:
    try:
        response = chat_client(timeout=30.0).chat.completions.create(
            model=settings.OPENAI_CHAT_MODEL,
            messages=[
                {"role": "system", "content": PROMPT},
                {"role": "user", "content": json.dumps(facts, default=str)},
            ],
            max_tokens=600,
            temperature=0.2,
        )
        text = (response.choices[0].message.content or "").strip()
    except Exception:  # any failure of the provider: the template still writes the week
        logger.warning("weekly synthesis: the LLM call failed; using the template", exc_info=True)
        return None
    return text or None


def recipients(project: Project) -> list[User]:
    opted_out = set(
        SynthesisOptOut.objects.filter(organization_id=project.organization_id).values_list(
            "user_id", flat=True
        )
    )
    return [u for u in project_stewards(project) if u.pk not in opted_out and u.email and u.is_active]


def synthesize(project: Project, week_start: date | None = None, *, email: bool = True) -> WeeklySynthesis:
    """Write (once) the week's synthesis for the project, email it and announce it."""
    week_start = week_start or last_week()
    existing = WeeklySynthesis.objects.filter(project=project, week_start=week_start).first()
    if existing is not None:
        return existing
    facts = gather(project, week_start)
    text = llm_text(facts) if llm_configured() else None
    with transaction.atomic():
        synthesis, created = WeeklySynthesis.objects.get_or_create(
            project=project,
            week_start=week_start,
            defaults={
                "organization_id": project.organization_id,
                "text": text or template_text(facts),
                "facts": facts,
                "used_llm": text is not None,
            },
        )
        if not created:
            return synthesis
        events.emit(project.organization_id, "insights.weekly", weekly_payload(project, synthesis))
    if email and not quiet(facts):
        synthesis.emailed_to = send_synthesis(project, synthesis)
        WeeklySynthesis.objects.filter(pk=synthesis.pk).update(emailed_to=synthesis.emailed_to)
    return synthesis


def quiet(facts: dict[str, Any]) -> bool:
    """Nothing happened: no memory learned or used, no dispute, no session (no email then)."""
    return not (
        facts["learned"]["count"]
        or facts["used_most"]
        or facts["disputed"]["opened"]
        or facts["disputed"]["resolved"]
        or any(facts["ab"]["groups"].values())
    )


def weekly_payload(project: Project, synthesis: WeeklySynthesis) -> dict[str, Any]:
    return {
        "project_id": str(project.id),
        "week_start": synthesis.week_start.isoformat(),
        "text": synthesis.text,
        "facts": synthesis.facts,
        "used_llm": synthesis.used_llm,
    }


def send_synthesis(project: Project, synthesis: WeeklySynthesis) -> int:
    from django.urls import reverse

    link = settings.SITE_URL + reverse("insights", args=[project.organization.slug, project.slug])
    optout = settings.SITE_URL + reverse("weekly_opt_out", args=[project.organization.slug, project.slug])
    sent = 0
    for user in recipients(project):
        sent += send_mail(
            subject=f"{settings.ACCOUNT_EMAIL_SUBJECT_PREFIX}{project.name}: the week of {synthesis.week_start}",
            message=f"{synthesis.text}\n\nInsights: {link}\nStop these emails: {optout}",
            from_email=None,
            recipient_list=[user.email],
        )
    return sent


def synthesize_all(week_start: date | None = None) -> int:
    week_start = week_start or last_week()
    done = 0
    for project in Project.objects.select_related("organization").iterator():
        if not WeeklySynthesis.objects.filter(project=project, week_start=week_start).exists():
            synthesize(project, week_start)
            done += 1
    return done


def latest(project: Project) -> WeeklySynthesis | None:
    return WeeklySynthesis.objects.filter(project=project).order_by("-week_start").first()


def opt_out(*, organization_id, user: User, out: bool) -> None:
    if out:
        SynthesisOptOut.objects.get_or_create(organization_id=organization_id, user=user)
    else:
        SynthesisOptOut.objects.filter(organization_id=organization_id, user=user).delete()


def opted_out(*, organization_id, user: User) -> bool:
    return SynthesisOptOut.objects.filter(organization_id=organization_id, user=user).exists()
