"""A from–to period given as days or moments, made into the bounds a query compares with.

A day means the whole day in the server's time zone, as on the dashboard's browser: `to=2026-03-01`
includes everything on March 1st. A moment without an offset is read in that time zone too; a
moment is included at either end. Pure code: the caller passes the time zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo


@dataclass(frozen=True)
class Period:
    """`start <= t`, and `t < end` (or `t <= end` when `end_included`); None: no bound there."""

    start: datetime | None = None
    end: datetime | None = None
    end_included: bool = False

    @classmethod
    def between(cls, low: date | None, high: date | None, tz: tzinfo) -> Period | None:
        """The period from `low` to `high` (dates or datetimes), None when neither is given.
        ValueError when it ends before it starts."""
        if low is None and high is None:
            return None
        start = _moment(low, tz) if low is not None else None
        end, included = (None, False) if high is None else _end(high, tz)
        if start is not None and end is not None and (start > end or (start == end and not included)):
            raise ValueError("the period ends before it starts")
        return cls(start, end, included)

    def lookups(self, field: str) -> dict[str, datetime]:
        """ORM lookups on `field` for this period."""
        found = {}
        if self.start is not None:
            found[f"{field}__gte"] = self.start
        if self.end is not None:
            found[f"{field}__{'lte' if self.end_included else 'lt'}"] = self.end
        return found


def _moment(value: date, tz: tzinfo) -> datetime:
    if not isinstance(value, datetime):
        value = datetime.combine(value, time.min)
    return value if value.tzinfo is not None else value.replace(tzinfo=tz)


def _end(value: date, tz: tzinfo) -> tuple[datetime | None, bool]:
    if isinstance(value, datetime):
        return _moment(value, tz), True
    if value == date.max:  # (nothing is later)
        return None, False
    return _moment(value + timedelta(days=1), tz), False
