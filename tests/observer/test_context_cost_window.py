"""The daily context-cost window: every project's long-running modules scaled to 30 sessions'
worth, their averages kept; other kinds of figures and short runs untouched."""

from __future__ import annotations

from apps.observer.models import PatternStat
from apps.observer.tasks import context_cost_window_task
from memorysaas.kernel.schedules import JOBS


def _stat(project, kind, sessions, module="m"):
    return PatternStat.objects.create(
        project=project, kind=kind, key=f"{kind}:{module}", module=module, session_count=sessions,
        total=10.0 * sessions, total2=float(sessions),
    )  # fmt: skip


def test_the_daily_window_scales_every_projects_long_runs_only(alice, charlie):
    mine = _stat(alice.project, "context_token_spike", 90)
    theirs = _stat(charlie.project, "context_token_spike", 31)
    short = _stat(alice.project, "context_token_spike", 30, module="n")
    other_kind = _stat(alice.project, "file_access", 90)
    assert context_cost_window_task() == {"modules": 2}
    rows = {s.id: (s.session_count, s.total, s.total2) for s in PatternStat.objects.all()}
    assert rows[mine.id] == (30, 300.0, 30.0) and rows[theirs.id] == (30, 300.0, 30.0)
    assert rows[short.id] == (30, 300.0, 30.0) and rows[other_kind.id] == (90, 900.0, 90.0)
    assert context_cost_window_task() == {"modules": 0}


def test_it_is_a_daily_job_on_the_bulk_lane():
    job = JOBS["observer.context_cost_window"]
    assert (job.schedule_type, job.lane) == ("D", "bulk")
