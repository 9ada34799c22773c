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
        ...
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
