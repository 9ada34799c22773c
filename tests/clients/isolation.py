"""Isolation probes for the device login's endpoints."""

from tests.isolation import api_unscoped

api_unscoped(
    "POST",
    "/api/v1/device/code",
    "starts a login; names no tenant (tests/clients/test_device_flow.py)",
)
api_unscoped(
    "POST",
    "/api/v1/device/token",
    "addressed by a secret device code; approving into another's org is refused"
    " (test_another_organizations_member_cannot_approve_into_it)",
)
