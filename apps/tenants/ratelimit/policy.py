"""Who is limited by what: the buckets a request is charged to, what an operation weighs, and
the address a request comes from."""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.http import HttpRequest

from apps.tenants.models import ApiKey, Organization, OrganizationLimits
from apps.tenants.ratelimit.buckets import Limit

if TYPE_CHECKING:
    from apps.tenants.principal import Principal


class Scope:
    API_KEY = "api_key"
    USER = "user"
    ORGANIZATION = "organization"
    CLIENT_IP = "client_ip"


@dataclass(frozen=True)
class Bucket:
    scope: str
    key: str  # the store's name for it
    limit: Limit


@dataclass(frozen=True)
class OrgLimits:
    per_key: Limit  # each API key (or signed-in person)
    organization: Limit  # all of the organization's keys together
    custom: bool  # set for this organization, rather than the defaults


def default_key_limit() -> Limit:
    return Limit(settings.RATE_LIMIT_KEY_PER_MINUTE, settings.RATE_LIMIT_KEY_BURST)


def org_limits(overrides: OrganizationLimits | None) -> OrgLimits:
    """The defaults from settings, with whatever the organization's own row sets instead."""

    def pick(field: str, default: int) -> int:
        value = getattr(overrides, field, None) if overrides is not None else None
        return value if value is not None else default

    return OrgLimits(
        per_key=Limit(
            pick("key_per_minute", settings.RATE_LIMIT_KEY_PER_MINUTE),
            pick("key_burst", settings.RATE_LIMIT_KEY_BURST),
        ),
        organization=Limit(
            pick("org_per_minute", settings.RATE_LIMIT_ORG_PER_MINUTE),
            pick("org_burst", settings.RATE_LIMIT_ORG_BURST),
        ),
        custom=overrides is not None,
    )


def limits_of(organization: Organization) -> OrgLimits:
    return org_limits(OrganizationLimits.objects.filter(organization=organization).first())


def _loaded_overrides(organization: Organization) -> OrganizationLimits | None:
    """The organization's limits row, read along with the key when it was authenticated."""
    try:
        return organization.limits
    except OrganizationLimits.DoesNotExist:
        return None


def key_bucket(api_key: ApiKey, limits: OrgLimits) -> Bucket:
    return Bucket(Scope.API_KEY, f"key:{api_key.id}", limits.per_key)


def org_bucket(organization_id, limits: OrgLimits) -> Bucket:
    return Bucket(Scope.ORGANIZATION, f"org:{organization_id}", limits.organization)


def user_bucket(user) -> Bucket:
    """A signed-in person using the API: one bucket across their organizations, at the default
    per-key limit (which organization a request is for is known only inside the view)."""
    return Bucket(Scope.USER, f"user:{user.pk}", default_key_limit())


def buckets_for(principal: Principal) -> list[Bucket]:
    """The key's bucket first, then its organization's: a key over its own limit is refused
    before it spends the budget its organization's other keys share."""
    if principal.api_key is not None:
        api_key = principal.api_key
        limits = org_limits(_loaded_overrides(api_key.organization))
        return [key_bucket(api_key, limits), org_bucket(api_key.organization_id, limits)]
    if principal.user is not None:
        return [user_bucket(principal.user)]
    return []


def failed_auth_limit() -> Limit:
    return Limit(settings.RATE_LIMIT_FAILED_AUTH_PER_MINUTE, settings.RATE_LIMIT_FAILED_AUTH_BURST)


def failed_auth_bucket(request: HttpRequest) -> Bucket:
    return Bucket(Scope.CLIENT_IP, f"ip:{client_ip(request)}", failed_auth_limit())


# The API's expensive operations, by method and route (the URL pattern under /api/v1/), named
# as in RATE_LIMIT_WEIGHTS. Every other operation weighs 1.
WEIGHTED_OPERATIONS: dict[tuple[str, str], str] = {
    ("POST", "projects/<project_id>/search"): "search",
    ("POST", "projects/<project_id>/context"): "context",
    # (each agent step's injection packs a context too)
    ("POST", "sessions/<session_id>/step-injection"): "context",
    ("POST", "projects/<project_id>/graph/index"): "graph_index",
}
API_ROUTE_PREFIX = "api/v1/"


def operation_weight(name: str) -> int:
    return max(1, int(settings.RATE_LIMIT_WEIGHTS.get(name, 1)))


def weight_of(request: HttpRequest) -> int:
    match = request.resolver_match
    route = match.route.removeprefix(API_ROUTE_PREFIX) if match is not None else ""
    name = WEIGHTED_OPERATIONS.get((request.method or "", route))
    return operation_weight(name) if name is not None else 1


@functools.cache
def _networks(cidrs: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(cidr, strict=False) for cidr in cidrs)


def _is_trusted_proxy(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _networks(tuple(settings.RATE_LIMIT_TRUSTED_PROXIES)))


def _ident(address: str) -> str:
    """An IPv6 client is counted by its /64: one subscriber holds a whole /64 and could otherwise
    take a fresh address for every try."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def client_ip(request: HttpRequest) -> str:
    """REMOTE_ADDR, or, when that is a trusted proxy (RATE_LIMIT_TRUSTED_PROXIES), the nearest
    address in X-Forwarded-For that is not one. Walking from the right: each proxy appends the
    address it saw, so what a client wrote into the header itself lies further left and is
    reached only through proxies it does not control."""
    remote = request.META.get("REMOTE_ADDR") or ""
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR") or ""
    chain = [hop.strip() for hop in forwarded.split(",") if hop.strip()] + [remote]
    for address in reversed(chain):
        if not _is_trusted_proxy(address):
            return _ident(address)
    return _ident(chain[0])
