"""Background work through django-q2, always queued after the transaction commits.

Tasks receive ids, re-read what they need and must be idempotent: a worker can run one twice.
With `Q_CLUSTER["sync"]` (tests) the task runs inline when the transaction commits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction


def task_path(func: Callable[..., Any] | str) -> str:
    if isinstance(func, str):
        return func
    return f"{func.__module__}.{func.__qualname__}"


def enqueue(
    func: Callable[..., Any] | str, *args: Any, task_name: str | None = None, group: str | None = None
) -> None:
    """Queue `func(*args)` once the current transaction commits (at once outside one)."""
    from django_q.tasks import async_task

    path = task_path(func)
    options: dict[str, Any] = {}
    if task_name:
        options["task_name"] = task_name
    if group:
        options["group"] = group
    transaction.on_commit(lambda: async_task(path, *args, **options))
