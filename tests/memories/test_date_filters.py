"""The memories list filtered by when memories were created and last used, through the API."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from apps.memories.dateranges import Period
from apps.memories.models import Memory, MemoryUsage
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db

DAY = datetime(2026, 3, 1, tzinfo=UTC)


def _list(client, project, **params) -> list[str]:
    response = client.client.get(f"/api/v1/projects/{project.id}/memories", params, **client.headers)
    assert response.status_code == 200, response.content
    return [m["content"] for m in response.json()["items"]]


def _error(client, project, **params) -> dict:
    response = client.client.get(f"/api/v1/projects/{project.id}/memories", params, **client.headers)
    assert response.status_code == 422, response.content
    return response.json()["error"]


def _made(alice, content: str, *, created: datetime, used: datetime | None = None) -> Memory:
    memory = make_memory(alice, content=content)
    Memory.objects.filter(id=memory.id).update(created_at=created)
    if used is not None:
        MemoryUsage.objects.update_or_create(memory=memory, defaults={"last_accessed_at": used})
    return memory


@pytest.fixture
def dated(alice):
    """Four memories: created on Feb 28 late, Mar 1 at 09:30 and at 23:59, and Mar 2; used
    (last) on Mar 5, Mar 10, never, and Mar 20."""
    _made(alice, "feb28", created=DAY - timedelta(minutes=1), used=DAY + timedelta(days=4))
    _made(alice, "mar1-morning", created=DAY + timedelta(hours=9, minutes=30), used=DAY + timedelta(days=9))
    _made(alice, "mar1-night", created=DAY + timedelta(hours=23, minutes=59))
    _made(alice, "mar2", created=DAY + timedelta(days=1), used=DAY + timedelta(days=19))


def test_a_day_is_the_whole_day_at_either_end(alice, api_client, dated):
    client = api_client(alice.key)
    on_the_first = _list(client, alice.project, created_from="2026-03-01", created_to="2026-03-01")
    assert on_the_first == ["mar1-night", "mar1-morning"]
    assert _list(client, alice.project, created_to="2026-02-28") == ["feb28"]
    assert _list(client, alice.project, created_from="2026-03-02") == ["mar2"]


def test_a_moment_is_included_at_either_end(alice, api_client, dated):
    client = api_client(alice.key)
    assert _list(
        client, alice.project, created_from="2026-03-01T09:30:00Z", created_to="2026-03-01T23:59Z"
    ) == [
        "mar1-night",
        "mar1-morning",
    ]
    # a midnight moment is that instant, not the day it starts
    assert _list(client, alice.project, created_to="2026-03-01T00:00:00Z") == ["feb28"]
    # an offset is honoured: 10:00 at +01:00 is 09:00 UTC, before the morning memory
    assert _list(client, alice.project, created_to="2026-03-01T10:00:00+01:00") == ["feb28"]
    # without an offset, the server's time zone (UTC)
    assert _list(client, alice.project, created_from="2026-03-01T09:30") == [
        "mar2",
        "mar1-night",
        "mar1-morning",
    ]


def test_used_is_the_last_use_and_a_memory_never_used_is_outside(alice, api_client, dated):
    client = api_client(alice.key)
    assert _list(client, alice.project, used_from="2026-03-06") == ["mar2", "mar1-morning"]
    assert _list(client, alice.project, used_to="2026-03-10") == ["mar1-morning", "feb28"]
    assert _list(client, alice.project, used_from="2026-03-01", used_to="2026-03-31") == [
        "mar2",
        "mar1-morning",
        "feb28",
    ]
    both = _list(client, alice.project, created_from="2026-03-01", used_from="2026-03-01")
    assert both == ["mar2", "mar1-morning"]


def test_the_filters_hold_across_pages(alice, api_client, dated):
    client = api_client(alice.key)
    url = f"/api/v1/projects/{alice.project.id}/memories"
    params = {"created_from": "2026-03-01", "limit": 1}
    seen, cursor = [], None
    while True:
        page = client.client.get(
            url, params | ({"cursor": cursor} if cursor else {}), **client.headers
        ).json()
        seen += [m["content"] for m in page["items"]]
        if not (cursor := page["next_cursor"]):
            break
    assert seen == ["mar2", "mar1-night", "mar1-morning"]


@pytest.mark.parametrize(
    "params",
    [
        {"created_from": "yesterday"},
        {"created_to": "2026-02-30"},
        {"used_from": "2026-03-01T25:00"},
        {"used_to": "03/01/2026"},
    ],
)
def test_a_date_that_is_not_one_is_422(alice, api_client, params):
    error = _error(api_client(alice.key), alice.project, **params)
    assert error["code"] == "validation_error"
    assert "ISO 8601" in str(error["details"])


@pytest.mark.parametrize(
    "params",
    [
        {"created_from": "2026-03-02", "created_to": "2026-03-01"},
        {"used_from": "2026-03-01T10:00Z", "used_to": "2026-03-01T09:59:59Z"},
        {"created_from": "2026-03-02T00:00Z", "created_to": "2026-03-01"},  # (the day ends at midnight)
    ],
)
def test_a_period_that_ends_before_it_starts_is_422(alice, api_client, params):
    error = _error(api_client(alice.key), alice.project, **params)
    assert error["code"] == "validation_error"
    name = next(iter(params)).split("_")[0]
    assert f"{name}_from is after {name}_to" in str(error["details"])


def test_the_calendars_ends_are_no_error(alice, api_client, dated):
    client = api_client(alice.key)
    everything = ["mar2", "mar1-night", "mar1-morning", "feb28"]
    assert _list(client, alice.project, created_from="0001-01-01", created_to="9999-12-31") == everything
    assert _list(client, alice.project, created_from="0001-01-01T00:00:00+14:00") == everything
    assert _list(client, alice.project, created_to="9999-12-31T23:59:59-14:00") == everything
    assert _list(client, alice.project, created_from="2026-03-01", created_to="2026-03-01T09:30Z") == [
        "mar1-morning"
    ]


def test_the_schema_documents_the_filters(api_client, alice):
    schema = api_client(alice.key).client.get("/api/v1/openapi.json").json()
    params = {
        p["name"]: p for p in schema["paths"]["/api/v1/projects/{project_id}/memories"]["get"]["parameters"]
    }
    for name in ("created_from", "created_to", "used_from", "used_to"):
        formats = {s.get("format") for s in params[name]["schema"]["anyOf"]}
        assert {"date", "date-time"} <= formats, params[name]
        assert "whole day" in params[name]["description"]


def test_a_period_is_bounded_as_asked():
    plus_one = timezone(timedelta(hours=1))
    period = Period.between(date(2026, 3, 1), date(2026, 3, 1), plus_one)
    assert period.lookups("t") == {
        "t__gte": datetime(2026, 3, 1, tzinfo=plus_one),
        "t__lt": datetime(2026, 3, 2, tzinfo=plus_one),
    }
    moment = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
    assert Period.between(None, moment, plus_one).lookups("t") == {"t__lte": moment}
    assert Period.between(None, date.max, UTC) == Period()
    assert Period.between(None, None, UTC) is None
    with pytest.raises(ValueError):
        Period.between(date(2026, 3, 2), date(2026, 3, 1), UTC)
