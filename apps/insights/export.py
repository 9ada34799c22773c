"""The A/B comparison as CSV: one row per metric, then one per day and group."""

from __future__ import annotations

import csv
import io
from typing import Any

from apps.insights import metrics as M

_COLUMNS = ("section", "date", "key", "label", "unit", "control", "passive", "full", "effect", "effect_kind",
            "interval_low", "interval_high", "n_control", "n_full", "enough", "significant")  # fmt: skip


def _cell(value: Any) -> Any:
    # A spreadsheet runs a cell that starts with = + - @ as a formula: labels are ours, but keep
    # the rule so that a future free-text column cannot inject one.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return "" if value is None else value


def insights_csv(result: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(_COLUMNS)
    for m in result["metrics"]:
        lo, hi = m["interval"] or (None, None)
        writer.writerow([_cell(v) for v in (
            "comparison", "", m["key"], m["label"], m["unit"], m["control"], m["passive"], m["full"], m["effect"],
            m["effect_kind"], lo, hi, m["n_control"], m["n_full"], m["enough"], m["significant"],
        )])  # fmt: skip
    saved = result["tokens_saved"]
    lo, hi = saved["interval"] or (None, None)
    writer.writerow([_cell(v) for v in ("tokens_saved", "", "tokens_saved", saved["label"], "tokens", "", "", "",
                                        saved["estimate"], "absolute", lo, hi, "", "", "", "")])  # fmt: skip
    for row in result["daily"]:
        for group in ("control", "passive", "full"):
            values = row[group]
            for m in M.METRICS:
                if m.key in values:
                    writer.writerow([_cell(v) for v in (
                        "daily", row["date"], m.key, m.label, m.unit,
                        values[m.key] if group == "control" else "", values[m.key] if group == "passive" else "",
                        values[m.key] if group == "full" else "", "", "", "", "", "", "", "", "",
                    )])  # fmt: skip
    return out.getvalue()
