"""Reads of the insights app: the A/B comparison a project's Insights page and API show.

`project_insights(*, project, date_from, date_to) -> dict` is the contract the dashboard renders
(and `GET /api/v1/projects/{id}/insights` returns). It reads only the rollups the background jobs
wrote, never the raw sessions, so it is fast at any size. Its shape:

    {
      "period": {                      # the experiment period compared (never two mixed)
        "id": int | None, "started_at": iso, "ended_at": iso | None,
        "enabled": bool, "control_pct": int, "passive_pct": int, "full_pct": int,
        "date_from": "YYYY-MM-DD", "date_to": "YYYY-MM-DD",
      },
      "groups": {"control": n, "passive": n, "full": n},   # finalized sessions behind the figures
      "metrics": [
        {
          "key": "tool_calls",          # see metrics.METRICS for every key
          "label": "Tool calls per task",
          "unit": "calls",              # "calls", "files", "rate", "tokens", "steps", "memories"
          "higher_is_better": False,
          "control": mean | None, "passive": mean | None, "full": mean | None,
          "effect": float | None,       # full vs control: relative ((full - control) / control)
                                         # for counts, absolute (full - control) for rates
          "effect_kind": "relative" | "absolute",
          "interval": [lo, hi] | None,  # 95 % interval of `effect` (Welch for means, Newcombe-
                                         # Wilson for rates)
          "n_control": n, "n_full": n,
          "enough": bool,               # False: "not enough sessions yet" (show no effect)
          "significant": bool,          # enough and the interval excludes 0
        },
        ...,
        # last: "graph_boost_rate", counted per retrieval for the whole project (not per group):
        # its rate is under "full" (control and passive None), n_full is the retrievals that ran
        # the boost, "interval" is the rate's Wilson interval, "effect" None, "effect_kind" "none".
      ],
      "tokens_saved": {                 # per session, measured against control
        "estimate": float | None, "interval": [lo, hi] | None,
        "label": "estimate: control's mean tokens per task minus full's, 95 % interval",
      },
      "daily": [                        # one row per day of the window, oldest first
        {"date": "YYYY-MM-DD", "control": {key: mean|None, "n": n},
         "passive": {...}, "full": {...}},
        ...
      ],
    }
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from apps.insights import metrics as M
from apps.insights import stats
from apps.insights.models import DailyRollup, ExperimentPeriod, RetrievalDay
from apps.tenants.models import Project

GROUPS = ("control", "passive", "full")
# Below this many sessions with a value in control or in full, a metric says "not enough
# sessions yet" and shows no effect: with fewer, an interval is mostly noise.
MIN_SESSIONS = 10
TOKENS_LABEL = "estimate: control's mean tokens per task minus full's, with its 95 % interval"


# The request's one read, one round trip (on a busy machine each round trip, more than the rows,
# is what a request waits for): the period compared (the one asked for, else the newest that
# overlaps the window), the window's retrieval counts, and its daily rollup rows summed in the
# database: per group, each metric's [n, sum, sum of squares] over the window; per day and group,
# the sessions and each metric's mean.
_REPORT = f"""
    WITH p AS (
        SELECT ep.* FROM {ExperimentPeriod._meta.db_table} ep
        WHERE ep.project_id = %(project)s AND CASE
            WHEN %(period)s::bigint IS NOT NULL THEN ep.id = %(period)s::bigint
            ELSE ep.started_at <= %(end)s AND (ep.ended_at IS NULL OR ep.ended_at >= %(start)s) END
        ORDER BY ep.started_at DESC LIMIT 1
    ), d AS (
        SELECT d.day, d."group", d.sessions, d.sums FROM {DailyRollup._meta.db_table} d
        WHERE d.project_id = %(project)s AND d.period_id = (SELECT id FROM p)
          AND d.day BETWEEN %(date_from)s AND %(date_to)s AND d."group" = ANY(%(groups)s)
    )
    SELECT p.id, p.started_at, p.ended_at, p.enabled, p.control_pct, p.passive_pct,
        (SELECT COALESCE(sum(boosted), 0) FROM {RetrievalDay._meta.db_table}
         WHERE project_id = %(project)s AND day BETWEEN %(date_from)s AND %(date_to)s),
        (SELECT COALESCE(sum(changed_top), 0) FROM {RetrievalDay._meta.db_table}
         WHERE project_id = %(project)s AND day BETWEEN %(date_from)s AND %(date_to)s),
        (SELECT json_object_agg(g."group", g.sessions) FROM (
            SELECT d."group", sum(d.sessions) AS sessions FROM d GROUP BY d."group") g),
        (SELECT json_agg(json_build_array(t."group", t.key, t.n, t.s, t.q)) FROM (
            SELECT d."group", m.key, sum((m.v->>0)::float8) AS n, sum((m.v->>1)::float8) AS s,
                sum((m.v->>2)::float8) AS q
            FROM d, jsonb_each(d.sums) AS m(key, v) GROUP BY d."group", m.key) t),
        (SELECT json_agg(json_build_array(d.day, d."group", d.sessions, (
            SELECT json_object_agg(m.key, (m.v->>1)::float8 / (m.v->>0)::float8)
            FROM jsonb_each(d.sums) AS m(key, v) WHERE (m.v->>0)::float8 > 0)) ORDER BY d.day)
         FROM d)
    FROM (SELECT 1) AS one LEFT JOIN p ON true
"""


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


def _read(project: Project, date_from: date, date_to: date, period_id: int | None):
    """(the period or None, (boosted, changed), {group: sessions}, {group: {metric: [n, sum, sum of
    squares]}}, [(day, group, sessions, {metric: mean})])."""
    params = {
        "project": project.pk, "date_from": date_from, "date_to": date_to, "period": period_id,
        "start": timezone.make_aware(datetime.combine(date_from, time.min)),
        "end": timezone.make_aware(datetime.combine(date_to, time.max)), "groups": list(GROUPS),
    }  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(_REPORT, params)
        (pk, started_at, ended_at, enabled, control_pct, passive_pct, boosted, changed, sessions,
         totals, daily) = cursor.fetchone()  # fmt: skip
    period = None
    if pk is not None:
        period = ExperimentPeriod(
            id=pk, project=project, started_at=started_at, ended_at=ended_at, enabled=enabled,
            control_pct=control_pct, passive_pct=passive_pct,
        )  # fmt: skip
    by_group: dict[str, dict[str, list[float]]] = {g: {} for g in GROUPS}
    for group, key, n, total, squares in _json(totals) or []:
        by_group[group][key] = [n, total, squares]
    return period, (boosted, changed), _json(sessions) or {}, by_group, _json(daily) or []


def _moments(sums: dict[str, list[float]], key: str) -> stats.Moments:
    n, total, squares = sums.get(key, (0, 0.0, 0.0))
    return stats.Moments(n, total, squares)


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _metric(metric: M.Metric, by_group: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    moments = {g: _moments(by_group.get(g, {}), metric.key) for g in GROUPS}
    full, control = moments["full"], moments["control"]
    enough = full.n >= MIN_SESSIONS and control.n >= MIN_SESSIONS
    if metric.kind == M.RATE:
        compared = stats.rate_difference(full, control)
    elif metric.effect == M.RELATIVE:
        compared = stats.relative_difference(full, control)
    else:
        compared = stats.mean_difference(full, control)
    effect, interval = compared if (compared and enough) else (None, None)
    return {
        "key": metric.key,
        "label": metric.label,
        "unit": metric.unit,
        "higher_is_better": metric.higher_is_better,
        **{g: _round(moments[g].mean) for g in GROUPS},
        "effect": _round(effect),
        "effect_kind": metric.effect,
        "interval": [_round(interval[0]), _round(interval[1])] if interval else None,
        "n_control": int(control.n),
        "n_full": int(full.n),
        "enough": enough,
        "significant": bool(interval and (interval[0] > 0 or interval[1] < 0)),
    }


def _graph_boost(boosted: int, changed: int) -> dict[str, Any]:
    rate = changed / boosted if boosted else None
    interval = stats.wilson(changed, boosted) if boosted else None
    metric = M.GRAPH_BOOST
    return {
        "key": metric.key, "label": metric.label, "unit": metric.unit,
        "higher_is_better": metric.higher_is_better,
        "control": None, "passive": None, "full": _round(rate), "effect": None, "effect_kind": "none",
        "interval": [_round(interval[0]), _round(interval[1])] if interval else None,
        "n_control": 0, "n_full": boosted, "enough": boosted >= MIN_SESSIONS, "significant": False,
    }  # fmt: skip


def project_insights(
    *, project: Project, date_from: date, date_to: date, period_id: int | None = None
) -> dict[str, Any]:
    period, (boosted, changed), counts, by_group, rows = _read(project, date_from, date_to, period_id)
    sessions = {g: int(counts.get(g, 0)) for g in GROUPS}
    daily: dict[str, dict[str, Any]] = defaultdict(dict)
    for day, group, count, means in rows:
        # (rounded here, as Python rounds: the database would round a tie the other way)
        daily[day][group] = {**{key: _round(mean) for key, mean in (means or {}).items()}, "n": count}
    tokens = stats.mean_difference(
        _moments(by_group["control"], "tokens"), _moments(by_group["full"], "tokens")
    )
    tokens_enough = min(_moments(by_group[g], "tokens").n for g in ("control", "full")) >= MIN_SESSIONS
    return {
        "period": _period(period, date_from, date_to),
        "groups": sessions,
        "metrics": [_metric(m, by_group) for m in M.METRICS] + [_graph_boost(boosted, changed)],
        "tokens_saved": {
            "estimate": _round(tokens[0], 1) if tokens and tokens_enough else None,
            "interval": [_round(tokens[1][0], 1), _round(tokens[1][1], 1)]
            if tokens and tokens_enough
            else None,
            "label": TOKENS_LABEL,
        },
        "daily": [{"date": day, **{g: daily[day].get(g, {"n": 0}) for g in GROUPS}} for day in sorted(daily)],
    }


def _period(period: ExperimentPeriod | None, date_from: date, date_to: date) -> dict[str, Any]:
    window = {"date_from": date_from.isoformat(), "date_to": date_to.isoformat()}
    if period is None:
        return {"id": None, "started_at": None, "ended_at": None, "enabled": True, "control_pct": 5,
                "passive_pct": 10, "full_pct": 85, **window}  # fmt: skip
    return {
        "id": period.pk,
        "started_at": period.started_at.isoformat(),
        "ended_at": period.ended_at.isoformat() if period.ended_at else None,
        "enabled": period.enabled,
        "control_pct": period.control_pct,
        "passive_pct": period.passive_pct,
        "full_pct": period.full_pct,
        **window,
    }


def tokens_saved_estimate(*, project: Project, date_from: date, date_to: date) -> dict[str, Any]:
    """Tokens saved per session, measured against control (the dashboard's health page shows it
    in place of the old per-injection guess)."""
    return project_insights(project=project, date_from=date_from, date_to=date_to)["tokens_saved"]


TOKENS_WINDOW_DAYS = 30


def tokens_saved_total(*, project: Project, days: int = TOKENS_WINDOW_DAYS) -> dict[str, Any]:
    """Tokens saved over the last `days`: the measured saving per full-memory session (control's
    mean tokens per task minus full's) times the full-memory sessions in the window, with the
    interval scaled alike. None where there are not enough sessions yet to measure it."""
    today = timezone.localdate()
    report = project_insights(project=project, date_from=today - timedelta(days=days - 1), date_to=today)
    saved, sessions = report["tokens_saved"], report["groups"]["full"]
    per_session, interval = saved["estimate"], saved["interval"]
    return {
        "per_session": per_session,
        "interval": interval,
        "sessions": sessions,
        "total": round(per_session * sessions) if per_session is not None else None,
        "total_interval": [round(interval[0] * sessions), round(interval[1] * sessions)]
        if interval
        else None,
        "days": days,
        "label": saved["label"],
    }
