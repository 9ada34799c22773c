"""Retrieval latency samples, collected cheaply where a search runs and stored in batches.

`record(project_id, kind, timings)` appends one sample to this process's buffer (no I/O); every
FLUSH_SAMPLES samples, or on the first sample FLUSH_SECONDS after the last flush, the buffer is
handed to the sink an app registered (apps/insights stores it with one multi-row INSERT). A
process that dies loses at most one buffer of samples: the percentiles they feed are estimates
over many searches, not an audit trail.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.db import DatabaseError, transaction

logger = logging.getLogger(__name__)

FLUSH_SAMPLES = 50
FLUSH_SECONDS = 30.0

Sample = tuple[str, str, float, datetime]  # project id, kind, milliseconds, when
Sink = Callable[[list[Sample]], None]

_lock = threading.Lock()
_buffer: list[Sample] = []
_last_flush = time.monotonic()
_sink: Sink | None = None


def register_sink(sink: Sink) -> None:
    global _sink
    _sink = sink


def record(project_id: UUID | str, kind: str, timings: dict[str, Any]) -> dict[str, Any]:
    """Note `timings["total"]` (ms) for the project; returns `timings` unchanged, so a caller can
    wrap the value it returns anyway."""
    total = timings.get("total")
    if _sink is None or not isinstance(total, int | float):
        return timings
    global _last_flush
    now = time.monotonic()
    with _lock:
        _buffer.append((str(project_id), kind, float(total), datetime.now(UTC)))
        due = len(_buffer) >= FLUSH_SAMPLES or now - _last_flush >= FLUSH_SECONDS
        batch = _take() if due else []
        if due:
            _last_flush = now
    if batch:
        _write(batch)
    return timings


def flush() -> int:
    """Store what the buffer holds now (tests, shutdown); returns how many samples."""
    with _lock:
        batch = _take()
    if batch:
        _write(batch)
    return len(batch)


def _take() -> list[Sample]:
    batch = list(_buffer)
    _buffer.clear()
    return batch


def _write(batch: list[Sample]) -> None:
    if _sink is None:
        return
    try:
        with transaction.atomic():  # (a savepoint when the caller is inside a transaction)
            _sink(batch)
    except DatabaseError:
        logger.warning("could not store %s retrieval latency samples", len(batch), exc_info=True)
