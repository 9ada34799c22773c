"""Trust progression: four levels, each with its injection threshold, and the rules
that *offer* a move between them from the project's feedback. Nothing here changes a level;
an owner or admin accepts an offer on the trust page (services.trust_level_set).

- Cautious (1): inject confidence > 0.80. Advance when 3+ sessions and 50%+ of the project's
  memories are confirmed.
- Standard (2): > 0.65. Advance when 10+ sessions and corrections are under 5% of the
  judgements (confirmations + corrections + flags), with at least one judgement.
- Confident (3): > 0.55. Autonomous is opt-in only: offered as a choice, never suggested.
- Autonomous (4): > 0.45.
- Regression: 3+ memories flagged wrong in one session since the level was last set offers
  the next more conservative level.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Q

from apps.governance.models import ProjectTrust, TrustLevel
from apps.memories.models import FeedbackKind
from apps.memories.selectors import feedback_of_project, memories_of_project
from apps.tenants.models import Project

THRESHOLDS: dict[int, float] = {
    TrustLevel.CAUTIOUS: 0.80,
    TrustLevel.STANDARD: 0.65,
    TrustLevel.CONFIDENT: 0.55,
    TrustLevel.AUTONOMOUS: 0.45,
}
DESCRIPTIONS: dict[int, str] = {
    TrustLevel.CAUTIOUS: "Only memories at or above 0.80 confidence are injected; new memories need confirmation.",
    TrustLevel.STANDARD: "Memories at or above 0.65 are injected; confirming all is the default.",
    TrustLevel.CONFIDENT: "Memories at or above 0.55 are injected; summaries show only what needs review.",
    TrustLevel.AUTONOMOUS: "Memories at or above 0.45 are injected; summaries are suppressed. Opt-in only.",
}
SESSIONS_TO_STANDARD = 3
CONFIRMED_SHARE_TO_STANDARD = 0.5
SESSIONS_TO_CONFIDENT = 10
MAX_CORRECTION_RATE = 0.05
FLAGS_IN_ONE_SESSION = 3


@dataclass(frozen=True)
class TrustStats:
    sessions: int
    memories: int
    confirmed_memories: int
    confirmations: int
    corrections: int
    flags: int
    worst_session_flags: int

    @property
    def confirmed_share(self) -> float:
        return self.confirmed_memories / self.memories if self.memories else 0.0

    @property
    def correction_rate(self) -> float | None:
        judgements = self.confirmations + self.corrections + self.flags
        return self.corrections / judgements if judgements else None


@dataclass(frozen=True)
class Offer:
    level: int
    direction: str  # "advance" or "regress"
    reason: str

    @property
    def label(self) -> str:
        return TrustLevel(self.level).label


def current_level(project: Project) -> int | None:
    return ProjectTrust.objects.filter(project=project).values_list("level", flat=True).first()


def threshold_for(project: Project) -> float:
    level = current_level(project)
    return THRESHOLDS[level] if level else float(settings.MEMORY_INJECTION_MIN_CONFIDENCE)


def trust_stats(project: Project, since: datetime | None = None) -> TrustStats:
    memories = memories_of_project(project=project).filter(deprecated=False)
    feedback = feedback_of_project(project=project)
    sessions = set(memories.exclude(session_id="").values_list("session_id", flat=True).distinct())
    sessions |= set(feedback.exclude(session_id="").values_list("session_id", flat=True).distinct())
    counts = feedback.aggregate(
        confirmations=Count("id", filter=Q(kind=FeedbackKind.CONFIRM)),
        corrections=Count("id", filter=Q(kind=FeedbackKind.CORRECT)),
        flags=Count("id", filter=Q(kind=FeedbackKind.FLAG)),
    )
    recent_flags = feedback.filter(kind=FeedbackKind.FLAG).exclude(session_id="")
    if since is not None:
        recent_flags = recent_flags.filter(created_at__gte=since)
    worst = (
        recent_flags.values("session_id")
        .annotate(n=Count("memory_id", distinct=True))
        .order_by("-n")
        .values_list("n", flat=True)
        .first()
    )
    return TrustStats(
        sessions=len(sessions),
        memories=memories.count(),
        confirmed_memories=memories.filter(feedback__kind=FeedbackKind.CONFIRM).distinct().count(),
        worst_session_flags=worst or 0,
        **counts,
    )


def offer_for(level: int | None, stats: TrustStats) -> Offer | None:
    """The move the rules suggest from `level` given `stats`, or None."""
    if level is None:
        return Offer(TrustLevel.CAUTIOUS, "advance", "New projects start Cautious.")
    if stats.worst_session_flags >= FLAGS_IN_ONE_SESSION and level > TrustLevel.CAUTIOUS:
        return Offer(
            level - 1,
            "regress",
            f"{stats.worst_session_flags} memories were flagged wrong in one session.",
        )
    if (
        level == TrustLevel.CAUTIOUS
        and stats.sessions >= SESSIONS_TO_STANDARD
        and stats.confirmed_share >= CONFIRMED_SHARE_TO_STANDARD
    ):
        return Offer(
            TrustLevel.STANDARD,
            "advance",
            f"{stats.sessions} sessions and {stats.confirmed_share:.0%} of memories confirmed.",
        )
    rate = stats.correction_rate
    if (
        level == TrustLevel.STANDARD
        and stats.sessions >= SESSIONS_TO_CONFIDENT
        and rate is not None
        and rate < MAX_CORRECTION_RATE
    ):
        return Offer(
            TrustLevel.CONFIDENT,
            "advance",
            f"{stats.sessions} sessions and a {rate:.1%} correction rate.",
        )
    return None


def project_offer(project: Project) -> Offer | None:
    trust = ProjectTrust.objects.filter(project=project).first()
    stats = trust_stats(project, since=trust.changed_at if trust else None)
    return offer_for(trust.level if trust else None, stats)


def allowed_levels(level: int | None, offer: Offer | None) -> list[int]:
    """What an owner/admin may pick now: the offer, any more conservative level, and
    Autonomous as an opt-in from Confident."""
    choices = {offer.level} if offer else set()
    if level is not None:
        choices |= {lvl for lvl in TrustLevel.values if lvl < level}
        if level == TrustLevel.CONFIDENT:
            choices.add(TrustLevel.AUTONOMOUS)
    return sorted(choices)
