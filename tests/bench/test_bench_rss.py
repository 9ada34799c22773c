"""`manage.py bench_rss`: the processes `make run` starts, warmed by real work, each one's memory."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.tenants.models import Organization


@pytest.mark.django_db(transaction=True)
def test_it_reads_every_process_after_a_worker_embedded_and_the_web_process_searched(monkeypatch):
    # (the hashing provider: no model to load, so the figures say which process mapped a runtime)
    monkeypatch.setenv("EMBEDDING_PROVIDER", "hashing")
    out = io.StringIO()
    call_command(
        "bench_rss", memories=2, idle=0, server_settings="memorysaas.settings.local", json=True, stdout=out
    )
    result = json.loads(out.getvalue().splitlines()[-1])

    roles = [row["role"] for row in result["processes"]]
    assert roles[0] == "web" and roles.count("cluster 1") >= 3  # the cluster's parent and its children
    assert result["search_hits"] >= 1  # the memories the workers embedded were found
    assert all(row["rss_mb"] > 20 and 0 < row["pss_mb"] <= row["rss_mb"] for row in result["processes"])
    assert result["total_rss_mb"] == round(sum(row["rss_mb"] for row in result["processes"]), 1)
    assert result["with_models"] == 0 and result["with_torch"] == 0
    assert not Organization.objects.filter(slug__startswith="rss-bench-").exists()  # cleaned up


def test_a_cluster_setting_that_is_no_assignment_is_refused():
    with pytest.raises(CommandError, match="NAME=VALUE"):
        call_command("bench_rss", cluster=["Q_WORKERS"])
