"""Timestamps read through psycopg's C loader are the values Django's own loader gives."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import psycopg
import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import register_tzloader

from memorysaas.kernel.pgtimestamps import CTimestamptzLoader, use_c_timestamptz_loader

pytestmark = pytest.mark.django_db

SAMPLES = [
    "2024-03-01 12:34:56.789+05",
    "2024-03-01 12:34:56.000001-09:30",
    "1999-12-31 23:59:59.999999+00",
    "0001-01-01 00:00:00+00",
    "2038-01-19 03:14:08+14",
]


def _read(sql: str, params: list) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _loader() -> type:
    connection.ensure_connection()
    return connection.connection.adapters.get_loader(1184, psycopg.pq.Format.TEXT)


def test_connections_read_timestamptz_with_the_c_loader():
    assert _loader() is CTimestamptzLoader


def test_the_c_loader_reads_what_djangos_loader_reads():
    sql = "SELECT " + ", ".join(["%s::timestamptz"] * len(SAMPLES)) + ", now(), NULL::timestamptz"
    fast = _read(sql, SAMPLES)
    register_tzloader(connection.timezone, connection.connection)  # Django's loader again
    try:
        assert _loader() is not CTimestamptzLoader
        django_values = _read(sql, SAMPLES)
    finally:
        connection.connection.adapters.register_loader("timestamptz", CTimestamptzLoader)
    assert fast[:-2] == django_values[:-2]
    assert fast[-1] is None and django_values[-1] is None
    assert all(value.tzinfo is datetime.UTC for value in fast[:-1])
    assert fast[0] == datetime.datetime(2024, 3, 1, 7, 34, 56, 789000, tzinfo=datetime.UTC)


def test_a_session_in_another_time_zone_keeps_djangos_loader():
    registered = []
    raw = SimpleNamespace(
        info=SimpleNamespace(parameter_status=lambda name: "Europe/Paris"),
        adapters=SimpleNamespace(register_loader=lambda *args: registered.append(args)),
    )
    wrapper = SimpleNamespace(vendor="postgresql", connection=raw, timezone=datetime.UTC)
    use_c_timestamptz_loader(sender=None, connection=wrapper)
    assert registered == []
    raw.info.parameter_status = lambda name: "UTC"
    use_c_timestamptz_loader(sender=None, connection=wrapper)
    assert registered == [("timestamptz", CTimestamptzLoader)]
