"""The evaluation traces (`eval_observer`): each recorded JSON is what its generator writes, and
replaying it through the observer promotes every memory it expects and none it forbids."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from apps.bench.fixtures import django_shop, node_invoices
from apps.bench.management.commands.eval_observer import DEFAULT_DIR, trace_files

TRACES = {"django_shop": django_shop, "node_invoices": node_invoices}


@pytest.mark.parametrize("name", TRACES)
def test_the_recorded_trace_is_what_its_generator_writes(name):
    recorded = json.loads((DEFAULT_DIR / f"{name}.json").read_text())
    assert recorded == json.loads(json.dumps(TRACES[name].build()))


def test_traces_are_named_by_file_or_by_directory_each_once():
    shop = DEFAULT_DIR / "django_shop.json"
    assert trace_files([str(DEFAULT_DIR)]) == [shop, DEFAULT_DIR / "node_invoices.json"]
    assert (
        trace_files([str(shop), str(DEFAULT_DIR)])[0] == shop
        and len(trace_files([str(shop), str(DEFAULT_DIR)])) == 2
    )
    with pytest.raises(CommandError):
        trace_files([str(DEFAULT_DIR / "missing.json")])


@pytest.mark.parametrize("name", TRACES)
def test_replaying_a_trace_promotes_what_it_expects_and_nothing_it_forbids(name, db):
    out = StringIO()
    call_command("eval_observer", "--traces", str(DEFAULT_DIR / f"{name}.json"), "--json", stdout=out)
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    trace = summary["per_trace"][name]
    assert trace["found"] == trace["expected"] == len(TRACES[name].EXPECTED)
    assert summary["forbidden_promoted"] == 0
