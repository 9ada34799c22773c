"""The git cold start: co-change edges seeded from `git log --name-only` (services.git_cold_start)."""

from __future__ import annotations

import pytest

from apps.observer.models import PatternStat
from apps.observer.selectors import coaccess_partners

pytestmark = pytest.mark.django_db(transaction=False)


def test_git_cold_start_seeds_co_change_edges(agent, alice):
    log = "\n".join(
        [
            "commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f",
            "Author: Ann <ann@example.com>",
            "Date:   Mon Nov 2 10:00:00 2026 +0100",
            "",
            "    Add refunds",
            "",
            "shop/refunds/service.py",
            "shop/refunds/models.py",
            "",
            "commit 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b",
            "Author: Ann <ann@example.com>",
            "",
            "    Fix rounding",
            "",
            "shop/refunds/service.py",
            "shop/refunds/models.py",
            "shop/pricing.py",
        ]
    )
    response = agent.client.post(f"projects/{agent.project_id}/observer/git-log", {"log": log})
    assert response.status_code == 200
    assert response.json() == {"commits": 2, "commits_used": 2, "files": 3, "edges": 3}
    partners = coaccess_partners(alice.project.id, ["shop/refunds/service.py"])
    assert partners["shop/refunds/models.py"] > partners["shop/pricing.py"] > 0


def git_log(*files: str) -> str:
    return "\n".join(["commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f", "", "    Change", "", *files])


def test_git_log_pairs_alike_in_their_first_700_characters_are_stored_apart(agent):
    """Cut to 700 characters, two pairs became one row twice in one upsert: a 500."""
    log = git_log("d/" + "a" * 250 + ".py", "e/" + "b" * 460 + "1.py", "e/" + "b" * 460 + "2.py")
    response = agent.client.post(f"projects/{agent.project_id}/observer/git-log", {"log": log})
    assert response.status_code == 200, response.content
    assert response.json()["edges"] == 3 == PatternStat.objects.filter(kind="co_change").count()


def test_git_log_with_a_path_longer_than_a_module_is_taken(agent):
    """The pair's module was its whole first path, which outgrew the column: a 422."""
    log = git_log("p/" + "q" * 310 + ".py", "r.py")
    response = agent.client.post(f"projects/{agent.project_id}/observer/git-log", {"log": log})
    assert response.status_code == 200, response.content
    assert PatternStat.objects.get(kind="co_change").module == "p"
