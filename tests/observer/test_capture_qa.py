"""QA failures become error patterns (source qa_auto) at finalize, through the event API."""

from __future__ import annotations

import pytest

from apps.memories.models import Memory
from apps.observer import qa_report
from apps.observer.traces import Trace

pytestmark = pytest.mark.django_db(transaction=False)

PYTEST_REPORT = """\
============================= short test summary info ==============================
FAILED tests/test_orders.py::test_total_includes_tax - AssertionError: assert 107 == 100
FAILED tests/test_orders.py::test_refund - KeyError: 'refund_id'
2 failed, 40 passed in 3.12s
"""


def qa_memories():
    return list(Memory.objects.filter(source="qa_auto").order_by("created_at"))


def test_the_report_lines_of_common_runners_are_read_as_failures():
    report = "\n".join(
        [
            "FAILED tests/test_a.py::test_x - ValueError: bad",
            "FAIL src/cart.test.ts",
            "--- FAIL: TestCheckout (0.01s)",
            "orders/models.py:12:5: F401 `os` imported but unused",
            "web/app.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.",
            "/etc/passwd:1: not a repository file",
            "all good here",
        ]
    )
    found = qa_report.failures_in_report(report)
    assert [(f.name, f.files) for f in found] == [
        ("tests/test_a.py::test_x", ["tests/test_a.py"]),
        ("src/cart.test.ts", ["src/cart.test.ts"]),
        ("TestCheckout", []),
        ("orders/models.py:12", ["orders/models.py"]),
        ("web/app.ts:3", ["web/app.ts"]),
    ]
    assert found[0].error == "ValueError: bad"


def test_each_failed_check_becomes_an_error_pattern_with_its_files_and_error(agent):
    session = agent.open(task="add tax to order totals")
    agent.send(session["id"], Trace().read("orders/models.py").edit("orders/models.py").events)
    answer = agent.validate(session["id"], passed=False, report=PYTEST_REPORT)
    assert answer["failed_checks"] == 2
    agent.complete(session["id"], "failure")
    total, refund = qa_memories()
    assert total.type == "error_pattern" and total.source == "qa_auto" and not total.needs_review
    assert "test_total_includes_tax" in total.content and "assert 107 == 100" in total.content
    assert total.related_files == ["tests/test_orders.py"]
    assert "KeyError: 'refund_id'" in refund.content
    assert "qa_failure" in total.tags and total.session_id == session["id"]


def test_a_failure_fixed_later_in_the_session_names_what_fixed_it(agent):
    session = agent.open(task="add tax")
    trace = Trace().read("orders/models.py")
    agent.send(session["id"], trace.events)
    agent.validate(session["id"], passed=False, report=PYTEST_REPORT.splitlines()[1])
    agent.send(session["id"], trace.edit("orders/tax.py").events)
    agent.validate(session["id"], passed=True)
    agent.complete(session["id"])
    (memory,) = qa_memories()
    assert "Fixed by changing `orders/tax.py`" in memory.content
    assert set(memory.related_files) == {"tests/test_orders.py", "orders/tax.py"}


def test_the_same_failure_in_a_rerun_reinforces_instead_of_repeating(agent):
    for run in range(2):
        session = agent.open(task="add tax")
        agent.send(session["id"], Trace().read("orders/models.py").events)
        # the numbers differ between runs; the failure is the same
        report = (
            f"FAILED tests/test_orders.py::test_total_includes_tax - AssertionError: assert 10{run} == 100"
        )
        agent.validate(session["id"], passed=False, report=report)
        done = agent.complete(session["id"], "failure")
    (memory,) = qa_memories()
    assert done["reinforced_memory_ids"] == [str(memory.id)]
    assert memory.provenance_session_ids[-1] == session["id"]


def test_structured_checks_are_mined_by_severity_with_paths_under_the_root(agent):
    root = "/home/dev/shop"
    session = agent.open(root=root)
    checks = [
        {"name": "checkout e2e", "error": "Pay button stays disabled", "files": [f"{root}/web/pay.tsx"],
         "severity": "critical"},
        {"name": "lint", "error": "line too long", "severity": "low"},
        {"name": "unit", "passed": True},
    ]  # fmt: skip
    response = agent.client.post(
        f"sessions/{session['id']}/validation", {"passed": False, "report": "", "checks": checks}
    )
    assert response.status_code == 200 and response.json()["failed_checks"] == 1
    agent.complete(session["id"], "failure")
    (memory,) = qa_memories()
    assert memory.related_files == ["web/pay.tsx"] and "Pay button stays disabled" in memory.content


@pytest.mark.parametrize(
    "checks",
    [
        [{"error": "no name"}],
        [{"name": "x", "severity": "urgent"}],
        [{"name": "x", "files": "web/pay.tsx"}],
        [{"name": "x", "unknown": 1}],
        "not a list",
    ],
)
def test_malformed_checks_are_refused(agent, checks):
    session = agent.open()
    response = agent.client.post(f"sessions/{session['id']}/validation", {"passed": False, "checks": checks})
    assert response.status_code == 422 and "error" in response.json()


def test_a_secret_in_a_failed_check_never_reaches_the_memory(agent):
    key = "sk-ant-api03-" + "Z8x6C4v2B0n1" * 4
    session = agent.open()
    agent.validate(session["id"], passed=False, report=f"FAILED tests/test_api.py::test_auth - 401 for {key}")
    agent.complete(session["id"], "failure")
    (memory,) = qa_memories()
    assert key not in memory.content and "[REDACTED:anthropic_key]" in memory.content
