"""Who may read /metrics: loopback callers, and others only with METRICS_TOKEN."""

from __future__ import annotations

from memorysaas.metrics import allowed


def scope(address: str, token: str | None = None) -> dict:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return {"type": "http", "path": "/metrics", "client": (address, 50000), "headers": headers}


def test_loopback_is_served_and_other_addresses_are_not(settings):
    settings.METRICS_TOKEN = ""
    assert allowed(scope("127.0.0.1"))
    assert allowed(scope("::1"))
    assert not allowed(scope("10.1.2.3"))
    assert not allowed(scope("10.1.2.3", token="anything"))


def test_the_token_opens_it_to_any_address(settings):
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    assert allowed(scope("10.1.2.3", token="s3cret-scrape-token"))
    assert not allowed(scope("10.1.2.3", token="wrong"))
    settings.METRICS_ALLOW_LOOPBACK = False
    assert not allowed(scope("127.0.0.1"))
    assert allowed(scope("127.0.0.1", token="s3cret-scrape-token"))
