"""Rate limits: per API key, per organization, per client address for failed authentication;
429 with Retry-After and the envelope; counters shared by every process, in Redis or PostgreSQL.

The rest of the suite runs with RATE_LIMIT_ENABLED off (memorysaas/settings/test.py); every test
here turns it on through the `limits_on` fixture, once per store (Redis only where REDIS_URL is
set, as in CI)."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import uuid
from io import StringIO
from pathlib import Path

import httpx
import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import resolve

from apps.tenants import services
from apps.tenants.models import DataExport, RateLimitBucket
from apps.tenants.principal import SYSTEM
from apps.tenants.ratelimit import buckets, policy
from apps.tenants.ratelimit.buckets import Limit
from apps.tenants.ratelimit.stores import PostgresStore, RedisStore, current_store
from memorysaas.api import api
from tests.conftest import ApiClient, csrf_token_for
from tests.processes import Worker, database_url, free_port, log_tail, popen_server

ROOT = Path(__file__).resolve().parents[2]
ATTACKER = "203.0.113.66"  # (documentation addresses, RFC 5737)
ELSEWHERE = "198.51.100.7"


def _redis_url() -> str:
    url = settings.REDIS_URL or os.environ.get("REDIS_URL", "")
    if not url:
        pytest.skip("needs a real Redis at REDIS_URL")
    return url


@contextlib.contextmanager
def _redis_prefix(url: str):
    """A prefix of the test's own; its keys are deleted afterwards."""
    prefix = f"test-ratelimit-{uuid.uuid4().hex[:10]}:"
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(url)
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)


@pytest.fixture(params=["postgres", pytest.param("redis", marks=pytest.mark.redis)])
def limits_on(request, settings):
    """Rate limiting on, with the store of the parameter."""
    settings.RATE_LIMIT_ENABLED = True
    settings.RATE_LIMIT_STORE = request.param
    if request.param == "redis":
        with _redis_prefix(_redis_url()) as prefix:
            settings.RATE_LIMIT_REDIS_PREFIX = prefix
            yield settings
    else:
        yield settings


def _from(address: str, key: str | None) -> ApiClient:
    client = ApiClient(key)
    client.headers["HTTP_X_FORWARDED_FOR"] = address  # (the test client's own address is loopback)
    return client


def _bad_keys(alice) -> list[str]:
    """Random, malformed, guessed-for-a-real-prefix and revoked keys."""
    revoked, revoked_full = services.api_key_create(
        organization=alice.org, actor=alice.principal, name="old", scopes=["memories:read"]
    )
    services.api_key_revoke(api_key=revoked, actor=alice.principal)
    return [
        f"msk_{secrets.token_hex(4)}_{secrets.token_hex(20)}",
        "not-a-key",
        f"msk_{alice.api_key.prefix}_{'x' * 40}",  # alice's prefix, a wrong secret
        revoked_full,
    ]


def _assert_rate_limited(response, scope: str) -> dict:
    assert response.status_code == 429, response.content
    assert int(response["Retry-After"]) >= 1
    error = response.json()["error"]
    assert error["code"] == "rate_limited" and error["details"]["scope"] == scope
    assert error["details"]["retry_after_seconds"] == int(response["Retry-After"])
    return error


# --------------------------------------------------------------------------- failed authentication


def test_bad_keys_from_one_address_get_429_after_the_budget_and_a_good_key_elsewhere_is_unaffected(
    limits_on, alice
):
    limits_on.RATE_LIMIT_FAILED_AUTH_BURST = 8
    limits_on.RATE_LIMIT_FAILED_AUTH_PER_MINUTE = 1
    bad = _bad_keys(alice) * 2
    statuses = [_from(ATTACKER, key).get("me").status_code for key in bad]
    assert statuses == [401] * 8
    for key in [*bad[:2], alice.key]:  # out of budget: refused whatever the key, good ones too
        _assert_rate_limited(_from(ATTACKER, key).get("me"), "client_ip")
    # Alice, from her own address, is not locked out — though the attacker used her key's prefix.
    assert _from(ELSEWHERE, alice.key).get("me").status_code == 200


def test_a_locked_out_address_is_answered_before_its_key_is_looked_up(limits_on, alice):
    limits_on.RATE_LIMIT_FAILED_AUTH_BURST = 2
    limits_on.RATE_LIMIT_FAILED_AUTH_PER_MINUTE = 1
    for key in _bad_keys(alice)[:2]:
        assert _from(ATTACKER, key).get("me").status_code == 401
    with CaptureQueriesContext(connection) as queries:
        response = _from(ATTACKER, alice.key).get("me")
    assert response.status_code == 429
    assert not [q for q in queries.captured_queries if "tenants_apikey" in q["sql"]]


def test_a_person_signed_in_is_not_counted_as_failing(limits_on, alice, session_client):
    limits_on.RATE_LIMIT_FAILED_AUTH_BURST = 1
    client = session_client(alice)
    for _ in range(3):
        assert client.get("me").status_code == 200


def test_without_rate_limiting_bad_keys_are_401_every_time(settings, alice):
    settings.RATE_LIMIT_ENABLED = False
    settings.RATE_LIMIT_FAILED_AUTH_BURST = 1
    assert {_from(ATTACKER, "nope").get("me").status_code for _ in range(20)} == {401}


# --------------------------------------------------------------------------- keys and organizations


def test_a_key_over_its_budget_gets_429_while_its_colleagues_and_another_org_are_unaffected(
    limits_on, alice, bob, charlie
):
    limits_on.RATE_LIMIT_KEY_BURST = 3
    limits_on.RATE_LIMIT_KEY_PER_MINUTE = 1
    client = ApiClient(alice.key)
    assert [client.get("me").status_code for _ in range(3)] == [200] * 3
    error = _assert_rate_limited(client.get("me"), "api_key")
    assert error["details"]["burst"] == 3 and error["details"]["limit_per_minute"] == 1
    assert ApiClient(bob.key).get("me").status_code == 200  # same organization, another key
    assert ApiClient(charlie.key).get("me").status_code == 200  # another organization


def test_an_organization_over_its_budget_refuses_every_key_of_it_and_no_other(limits_on, alice, bob, charlie):
    limits_on.RATE_LIMIT_ORG_BURST = 4
    limits_on.RATE_LIMIT_ORG_PER_MINUTE = 1
    for person in (alice, bob, alice, bob):
        assert ApiClient(person.key).get("me").status_code == 200
    for person in (alice, bob):
        _assert_rate_limited(ApiClient(person.key).get("me"), "organization")
    assert ApiClient(charlie.key).get("me").status_code == 200


def test_a_key_refused_by_its_own_limit_spends_none_of_its_organizations(limits_on, alice, bob):
    limits_on.RATE_LIMIT_KEY_BURST = 2
    limits_on.RATE_LIMIT_KEY_PER_MINUTE = 1
    limits_on.RATE_LIMIT_ORG_BURST = 4
    limits_on.RATE_LIMIT_ORG_PER_MINUTE = 1
    flood = ApiClient(alice.key)
    statuses = [flood.get("me").status_code for _ in range(10)]
    assert statuses == [200, 200] + [429] * 8
    assert [ApiClient(bob.key).get("me").status_code for _ in range(2)] == [200, 200]


def test_a_person_signed_in_has_a_budget_of_their_own(limits_on, alice, session_client):
    limits_on.RATE_LIMIT_KEY_BURST = 2
    limits_on.RATE_LIMIT_KEY_PER_MINUTE = 1
    client = session_client(alice)
    assert [client.get("me").status_code for _ in range(2)] == [200, 200]
    _assert_rate_limited(client.get("me"), "user")
    assert ApiClient(alice.key).get("me").status_code == 200  # her key is another bucket


def test_weighted_operations_consume_more(limits_on, alice):
    limits_on.RATE_LIMIT_KEY_BURST = 7
    limits_on.RATE_LIMIT_KEY_PER_MINUTE = 1
    limits_on.RATE_LIMIT_WEIGHTS = {**settings.RATE_LIMIT_WEIGHTS, "search": 5}
    client = ApiClient(alice.key)
    # (a project that does not exist: the charge comes before the view, which then answers 404)
    search = f"projects/{uuid.uuid4()}/search"
    assert client.post(search, {"query": "retry"}).status_code == 404  # 5 of 7
    error = _assert_rate_limited(client.post(search, {"query": "retry"}), "api_key")
    assert error["details"]["weight"] == 5
    assert [client.get("me").status_code for _ in range(2)] == [200, 200]  # 1 each: 7 of 7
    _assert_rate_limited(client.get("me"), "api_key")


def test_every_weighted_operation_names_a_route_of_the_api():
    """A renamed route would quietly weigh 1: each entry must still match an operation."""
    sample = {"<project_id>": str(uuid.uuid4()), "<session_id>": str(uuid.uuid4())}
    schema_paths = api.get_openapi_schema()["paths"]
    for (method, route), name in policy.WEIGHTED_OPERATIONS.items():
        assert name in settings.RATE_LIMIT_WEIGHTS
        path = route
        for placeholder, value in sample.items():
            path = path.replace(placeholder, value)
        assert resolve(f"/api/v1/{path}").route == policy.API_ROUTE_PREFIX + route
        documented = "/api/v1/" + route.replace("<", "{").replace(">", "}")
        assert method.lower() in schema_paths[documented]


def test_an_organizations_own_limits_apply(limits_on, alice, charlie):
    services.organization_limits_set(
        organization=alice.org, actor=SYSTEM, limits={"key_burst": 2, "key_per_minute": 1}
    )
    client = ApiClient(alice.key)
    assert [client.get("me").status_code for _ in range(2)] == [200, 200]
    _assert_rate_limited(client.get("me"), "api_key")
    assert [ApiClient(charlie.key).get("me").status_code for _ in range(3)] == [200] * 3  # defaults


def test_org_limits_command_sets_shows_and_resets(db, alice):
    out = StringIO()
    call_command("org_limits", alice.org.slug, "--org-burst", "900", "--key-per-minute", "30", stdout=out)
    assert (
        "its own" in out.getvalue() and "per key 30/min" in out.getvalue() and "burst 900" in out.getvalue()
    )
    limits = policy.limits_of(alice.org)
    assert limits.custom and limits.organization.burst == 900 and limits.per_key.per_minute == 30
    assert limits.per_key.burst == settings.RATE_LIMIT_KEY_BURST  # not given: the default
    call_command("org_limits", alice.org.slug, "--reset", stdout=StringIO())
    assert not policy.limits_of(alice.org).custom


# --------------------------------------------------------------------------- what admins see


def test_admins_see_their_organizations_limits_and_use(limits_on, alice, bob):
    limits_on.RATE_LIMIT_KEY_BURST = 10
    limits_on.RATE_LIMIT_KEY_PER_MINUTE = 1
    limits_on.RATE_LIMIT_ORG_BURST = 50
    limits_on.RATE_LIMIT_ORG_PER_MINUTE = 1
    client = ApiClient(alice.key)
    for _ in range(3):
        assert client.get("me").status_code == 200
    assert ApiClient(bob.key).get("me").status_code == 200
    response = client.get(f"orgs/{alice.org.slug}/limits")  # (counts too: the 4th of alice's key)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["enabled"] is True and body["store"] == limits_on.RATE_LIMIT_STORE
    assert body["per_key"] == {"per_minute": 1, "burst": 10} and not body["custom"]
    assert body["organization"]["burst"] == 50 and body["organization"]["remaining"] == 50 - 5
    use = {key["prefix"]: key for key in body["api_keys"]}
    assert use[alice.api_key.prefix]["remaining"] == 10 - 4
    assert use[bob.api_key.prefix]["remaining"] == 10 - 1
    assert body["weights"]["search"] == settings.RATE_LIMIT_WEIGHTS["search"]


def test_members_may_not_see_the_limits_and_other_organizations_cannot_find_them(
    limits_on, alice, bob, charlie
):
    assert ApiClient(bob.key).get(f"orgs/{alice.org.slug}/limits").status_code == 403
    assert ApiClient(charlie.key).get(f"orgs/{alice.org.slug}/limits").status_code == 404


def test_the_api_keys_page_shows_the_limits_and_their_use(limits_on, alice, session_client):
    limits_on.RATE_LIMIT_KEY_BURST = 10
    limits_on.RATE_LIMIT_KEY_PER_MINUTE = 1
    ApiClient(alice.key).get("me")
    page = session_client(alice).client.get(f"/o/{alice.org.slug}/api-keys/").content.decode()
    assert 'id="limits-title"' in page and "bursts of up to 10" in page
    assert f"msk_{alice.api_key.prefix}" in page and "1 of 10" in page


def test_exports_asked_for_too_often_are_refused_with_a_message(limits_on, alice, session_client):
    limits_on.RATE_LIMIT_KEY_BURST = 40
    limits_on.RATE_LIMIT_KEY_PER_MINUTE = 1
    limits_on.RATE_LIMIT_WEIGHTS = {**settings.RATE_LIMIT_WEIGHTS, "export": 30}
    client = session_client(alice).client
    token = csrf_token_for(client)
    for _ in range(2):
        response = client.post(
            "/account/data/exports/", {"format": "json"}, HTTP_X_CSRFTOKEN=token, follow=True
        )
        assert response.status_code == 200
    assert DataExport.objects.filter(requested_by=alice.user).count() == 1
    assert "over your rate limit" in response.content.decode()


def test_the_schema_documents_429_on_every_operation():
    """Rate limits answer 429 on authenticated operations, and the admission gate on any path
    (a client with too many requests waiting), health included."""
    paths = api.get_openapi_schema()["paths"]
    for path in ("/api/v1/me", "/api/v1/health", "/api/v1/projects/{project_id}/search"):
        for operation in paths[path].values():
            assert "429" in {str(status) for status in operation["responses"]}, path


# --------------------------------------------------------------------------- the stores


def test_when_redis_cannot_be_reached_requests_go_unlimited(settings, alice, caplog):
    settings.RATE_LIMIT_ENABLED = True
    settings.RATE_LIMIT_STORE = "redis"
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    settings.RATE_LIMIT_KEY_BURST = 1
    client = ApiClient(alice.key)
    assert [client.get("me").status_code for _ in range(3)] == [200] * 3
    assert "Rate-limit store unreachable" in caplog.text


def _take_from_threads(make_store, *, threads: int, takes: int, limit: Limit) -> int:
    """`threads` threads, each with a store of its own, take `takes` times from one bucket; how
    many takes were allowed."""
    key = f"race:{uuid.uuid4().hex}"

    def work() -> int:
        store = make_store()
        return sum(store.take(key, cost=limit.cost(1), capacity=limit.capacity).allowed for _ in range(takes))

    workers = [Worker(work) for _ in range(threads)]
    results = [worker.finish() for worker in workers]
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return sum(results)


@pytest.mark.django_db(transaction=True)
def test_the_postgres_store_is_atomic_under_concurrent_threads():
    # (one request's worth comes back each minute: the test ends long before any does)
    limit = Limit(per_minute=1, burst=60)
    allowed = _take_from_threads(PostgresStore, threads=6, takes=25, limit=limit)
    assert allowed == 60


@pytest.mark.redis
def test_the_redis_store_is_atomic_under_concurrent_threads_and_separate_clients(db):
    url = _redis_url()
    limit = Limit(per_minute=1, burst=60)
    with _redis_prefix(url) as prefix:
        allowed = _take_from_threads(lambda: RedisStore(url, prefix), threads=6, takes=25, limit=limit)
    assert allowed == 60


def test_a_refused_take_changes_nothing_and_says_how_long_to_wait(limits_on, db):
    store = current_store()
    limit = Limit(per_minute=6, burst=2)  # one back every 10 s
    key = f"probe:{uuid.uuid4().hex}"
    first, second, third = (store.take(key, cost=limit.cost(1), capacity=limit.capacity) for _ in range(3))
    assert (first.allowed, second.allowed, third.allowed) == (True, True, False)
    assert third.tat == second.tat
    decision = buckets.after_take(limit=limit, weight=1, allowed=False, tat=third.tat, now=third.now)
    assert 0 < decision.retry_after <= 10 and decision.retry_after_seconds in range(1, 11)
    now, found = store.read([key, "never-used"])
    assert set(found) == {key} and found[key] == second.tat and now >= third.now


def test_the_sweep_forgets_only_emptied_postgres_buckets(db):
    store = PostgresStore()
    limit = Limit(per_minute=1, burst=5)
    store.take("sweep:live", cost=limit.cost(1), capacity=limit.capacity)
    RateLimitBucket.objects.create(key="sweep:empty", tat=1.0, checked_at=0.5)
    assert store.sweep() == 1
    assert set(RateLimitBucket.objects.values_list("key", flat=True)) == {"sweep:live"}


# --------------------------------------------------------------------------- the arithmetic


def test_a_bucket_passes_its_burst_then_one_request_per_interval():
    limit = Limit(per_minute=60, burst=3)
    now, tat = 1000.0, None
    passed = []
    for _ in range(4):
        decision = buckets.peek(limit=limit, tat=tat, now=now)
        passed.append(decision.allowed)
        if decision.allowed:
            tat = max(tat or now, now) + limit.cost(1)
    assert passed == [True, True, True, False]
    assert buckets.peek(limit=limit, tat=tat, now=now).retry_after == pytest.approx(1.0)
    assert buckets.peek(limit=limit, tat=tat, now=now + 1.0).allowed


def test_a_weight_above_the_burst_costs_the_burst_so_it_can_still_run():
    limit = Limit(per_minute=60, burst=4)
    assert limit.cost(10) == limit.capacity
    assert buckets.peek(limit=limit, tat=None, now=5.0, weight=10).allowed
    with pytest.raises(ValueError):
        Limit(per_minute=0, burst=1)


# --------------------------------------------------------------------------- the client's address


@pytest.mark.parametrize(
    ("remote", "forwarded", "client"),
    [
        ("198.51.100.1", "", "198.51.100.1"),
        ("198.51.100.1", "203.0.113.9", "198.51.100.1"),  # a client's own header, not believed
        ("10.0.0.5", "203.0.113.9", "203.0.113.9"),  # through the load balancer
        ("10.0.0.5", "1.2.3.4, 203.0.113.9", "203.0.113.9"),  # what the client wrote lies left
        ("10.0.0.5", "203.0.113.9, 10.0.0.7", "203.0.113.9"),  # two proxies
        ("127.0.0.1", "", "127.0.0.1"),
        ("10.0.0.5", "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),  # an IPv6 subscriber's /64
        ("10.0.0.5", "::ffff:203.0.113.9", "203.0.113.9"),
    ],
)
def test_the_client_address_comes_from_trusted_proxies_only(rf, remote, forwarded, client):
    request = rf.get("/api/v1/me", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)
    assert policy.client_ip(request) == client


# --------------------------------------------------------------------------- two processes


def _daphne(port: int, env: dict[str, str]) -> subprocess.Popen:
    return popen_server(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "memorysaas.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def _wait_until_serving(port: int, process: subprocess.Popen) -> None:
    """Poll until daphne answers (or has died): readiness by condition, not by sleeping."""
    for _ in range(600):
        if process.poll() is not None:
            raise AssertionError(f"daphne on {port} exited: {log_tail(process.log, 2000)}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1).status_code in (200, 503):
                return
        except httpx.HTTPError:
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)
    raise AssertionError(f"daphne on {port} never served")


@contextlib.contextmanager
def _store_env(store: str):
    """The environment that points a web process at `store` (with a Redis prefix of its own)."""
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    if store == "postgres":
        yield {**env, "RATE_LIMIT_STORE": "postgres"}
        return
    url = _redis_url()
    with _redis_prefix(url) as prefix:
        yield {
            **env,
            "REDIS_URL": url,
            "CHANNELS_PREFIX": prefix,
            "RATE_LIMIT_STORE": "redis",
            "RATE_LIMIT_REDIS_PREFIX": prefix,
        }


@pytest.fixture(params=["postgres", pytest.param("redis", marks=pytest.mark.redis)])
def two_daphnes(request):
    """Two web processes sharing the test database (and Redis), with tight limits on."""
    with _store_env(request.param) as store_env:
        env = {
            **store_env,
            "DJANGO_SETTINGS_MODULE": "memorysaas.settings.local",
            "DATABASE_URL": database_url(),
            "SECRET_KEY": settings.SECRET_KEY,
            "API_KEY_HMAC_KEY": settings.API_KEY_HMAC_KEY,
            "DB_CONN_MAX_AGE": "0",
            "MODELS_WARM_AT_START": "0",
            "RATE_LIMIT_ENABLED": "1",
            "RATE_LIMIT_KEY_BURST": "6",
            "RATE_LIMIT_KEY_PER_MINUTE": "1",
            "RATE_LIMIT_FAILED_AUTH_BURST": "4",
            "RATE_LIMIT_FAILED_AUTH_PER_MINUTE": "1",
        }
        ports = [free_port(), free_port()]
        processes = [_daphne(port, env) for port in ports]
        try:
            for port, process in zip(ports, processes, strict=True):
                _wait_until_serving(port, process)
            yield ports
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=30)


@pytest.mark.django_db(transaction=True)
def test_two_web_processes_share_the_counters(alice, charlie, two_daphnes):
    """Requests alternate between two daphne processes: together they get the burst, not twice
    it; failed authentications from one address add up across both too."""
    urls = [f"http://127.0.0.1:{port}/api/v1/me" for port in two_daphnes]
    good = {"Authorization": f"Bearer {alice.key}"}
    statuses = [httpx.get(urls[i % 2], headers=good, timeout=30).status_code for i in range(10)]
    assert statuses == [200] * 6 + [429] * 4
    refused = httpx.get(urls[0], headers=good, timeout=30)
    assert refused.json()["error"]["code"] == "rate_limited" and int(refused.headers["Retry-After"]) >= 1
    other = {"Authorization": f"Bearer {charlie.key}"}
    assert httpx.get(urls[1], headers=other, timeout=30).status_code == 200
    bad = {"Authorization": "Bearer msk_aaaaaaaa_" + "b" * 40}
    failures = [httpx.get(urls[i % 2], headers=bad, timeout=30).status_code for i in range(6)]
    assert failures == [401] * 4 + [429] * 2
