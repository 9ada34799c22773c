"""Recurring background jobs. Apps declare them in their AppConfig.ready():

    register_schedule("tenants.deletions", "apps.tenants.tasks.deletions_process_due_task", "D")

Each job runs on a queue lane (memorysaas.kernel.queue), the interactive one unless it says
`lane="bulk"`; and `ensure_schedules` (run after every migrate) creates or updates django-q2's Schedule rows,
so a fresh database and an upgraded one end up with the same jobs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Job:
    name: str
    func: str
    schedule_type: str  # django_q Schedule types: "I" (minutes), "H", "D", "W", ...
    minutes: int | None = None
    lane: str = "interactive"


JOBS: dict[str, Job] = {}


def register_schedule(
    name: str, func: str, schedule_type: str, *, minutes: int | None = None, lane: str = "interactive"
) -> None:
    JOBS[name] = Job(name=name, func=func, schedule_type=schedule_type, minutes=minutes, lane=lane)


def ensure_schedules(**_signal_kwargs) -> int:
    from django_q.models import Schedule

    from memorysaas.kernel.queue import lane_cluster

    for job in JOBS.values():
        Schedule.objects.update_or_create(
            name=job.name,
            defaults={
                "func": job.func,
                "schedule_type": job.schedule_type,
                "minutes": job.minutes,
                # The lane's cluster creates the job's tasks, on its own queue.
                "cluster": lane_cluster(job.lane),
            },
        )
    return len(JOBS)
