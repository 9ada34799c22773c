"""STAND-IN for `apps.insights.selectors.project_insights` until the A/B rollups land.

It returns the contract's shape (see the Insights page, apps/insights/views.py) from finalized
sessions directly, with Welch intervals on three metrics, so the page can be built and tested
against real data. The page imports `project_insights` from here in one place
(apps/insights/views.py: `from apps.insights.report_stub import project_insights`); when the
rollups exist, that import switches to `apps.insights.selectors` and this module goes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import date, datetime, time, timedelta
from typing import Any

from django.utils import timezone

from apps.observer.models import Session, SessionStatus
from apps.tenants.models import Project

ENOUGH = 10  # sessions per group before a comparison is shown
Z95 = 1.959964

# key, label, unit, higher is better, how to read it from a session
METRICS: tuple[tuple[str, str, str, bool], ...] = (
    ("tool_calls", "Tool calls per task", "calls", False),
    ("tokens", "Tokens per task", "tokens", False),
    ("first_pass", "QA first-pass rate", "share", True),
)


def _value(key: str, session: dict[str, Any]) -> float | None:
    pad = session["scratchpad"] or {}
    if key == "tool_calls":
        return float(pad.get("tool_calls") or 0)
    if key == "tokens":
        tokens = pad.get("tokens") or [0, 0]
        return float((tokens[0] or 0) + (tokens[1] or 0))
    if key == "first_pass":
        return 1.0 if session["outcome"] == "success" else 0.0
    return None


def _group(raw: str) -> str:
    return {"memory": "full"}.get(raw, raw)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _var(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    m = _mean(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)


def welch(control: list[float], full: list[float]) -> tuple[float, float, float] | None:
    """Relative difference of means (full vs control) and its 95 % interval (delta method)."""
    if len(control) < 2 or len(full) < 2:
        return None
    mc, mf = _mean(control), _mean(full)
    if mc == 0:
        return None
    se_diff = math.sqrt(_var(control) / len(control) + _var(full) / len(full))
    effect = (mf - mc) / abs(mc)
    half = Z95 * se_diff / abs(mc)
    return effect, effect - half, effect + half


def project_insights(*, project: Project, date_from: date, date_to: date) -> dict[str, Any]:
    start = timezone.make_aware(datetime.combine(date_from, time.min))
    end = timezone.make_aware(datetime.combine(date_to + timedelta(days=1), time.min))
    rows = list(
        Session.objects.filter(
            project=project, status=SessionStatus.COMPLETED, finalized_at__gte=start, finalized_at__lt=end
        ).values("ab_group", "outcome", "scratchpad", "finalized_at", "injected_memory_ids")
    )
    by_group: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_group[_group(row["ab_group"])].append(row)
    metrics = []
    for key, label, unit, higher in METRICS:
        values = {
            g: [v for r in by_group[g] if (v := _value(key, r)) is not None]
            for g in ("control", "full", "passive")
        }
        n_c, n_f = len(values["control"]), len(values["full"])
        enough = n_c >= ENOUGH and n_f >= ENOUGH
        result = welch(values["control"], values["full"]) if enough else None
        metrics.append(
            {
                "key": key,
                "label": label,
                "unit": unit,
                "higher_is_better": higher,
                "control": round(_mean(values["control"]), 4) if n_c else None,
                "full": round(_mean(values["full"]), 4) if n_f else None,
                "passive": round(_mean(values["passive"]), 4) if values["passive"] else None,
                "effect": round(result[0], 4) if result else None,
                "interval": [round(result[1], 4), round(result[2], 4)] if result else None,
                "n_control": n_c,
                "n_full": n_f,
                "enough": enough and result is not None,
                "significant": bool(result and (result[1] > 0 or result[2] < 0)),
            }
        )
    tokens = next(m for m in metrics if m["key"] == "tokens")
    daily: dict[date, dict[str, int]] = defaultdict(lambda: {"control": 0, "full": 0, "passive": 0})
    for row in rows:
        daily[timezone.localdate(row["finalized_at"])][_group(row["ab_group"])] += 1
    return {
        "period": {"from": date_from.isoformat(), "to": date_to.isoformat()},
        "groups": {g: len(by_group[g]) for g in ("control", "passive", "full")},
        "metrics": metrics,
        "tokens_saved": {
            "estimate": (
                round(-(tokens["effect"] or 0) * (tokens["control"] or 0) * tokens["n_full"])
                if tokens["enough"]
                else None
            ),
            "interval": (
                [
                    round(-tokens["interval"][1] * tokens["control"] * tokens["n_full"]),
                    round(-tokens["interval"][0] * tokens["control"] * tokens["n_full"]),
                ]
                if tokens["enough"]
                else None
            ),
            "label": "tokens saved by full-memory sessions against control (estimate, 95 % interval)",
        },
        "daily": [{"day": d.isoformat(), **counts} for d, counts in sorted(daily.items())],
    }
