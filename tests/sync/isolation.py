"""Sync names its project in the query or body, not the path: tested in tests/sync/test_sync.py."""

from tests.isolation import api_unscoped

api_unscoped(
    "GET", "/api/v1/sync/pull", "project in the query (test_outsiders_get_404_for_another_orgs_project)"
)
api_unscoped(
    "POST", "/api/v1/sync/push", "project in the body (test_outsiders_get_404_for_another_orgs_project)"
)
