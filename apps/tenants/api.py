"""Tenancy endpoints: health, the caller, organizations, projects and API keys."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

from ninja import Field, Router, Status
from pydantic import field_validator

from apps.tenants import selectors, services
from apps.tenants.models import Methodology
from apps.tenants.ratelimit.usage import usage_for
from apps.tenants.roles import API_KEY_SCOPES, Perm
from memorysaas.kernel.errors import Invalid, NotFound, conflict
from memorysaas.kernel.health import health_report
from memorysaas.kernel.openapi import link, links, openapi_extra
from memorysaas.kernel.schemas import InputSchema, Name, OutputSchema

router = Router(tags=["tenancy"])


class HealthOut(OutputSchema):
    status: str
    checks: dict


@router.get("/health", auth=None, response={200: HealthOut, 503: HealthOut}, tags=["health"])
def health(request):
    """Database, pgvector, task queue and channel layer, each with its latency."""
    report = health_report()
    return Status(200 if report["status"] == "ok" else 503, report)


class OrgOut(OutputSchema):
    id: UUID
    slug: str
    name: str
    is_personal: bool


class OrgWithRoleOut(OrgOut):
    role: str | None
    permissions: list[str]


class MeOut(OutputSchema):
    kind: str
    email: str | None
    api_key_prefix: str | None
    project_limit: UUID | None
    organizations: list[OrgWithRoleOut]


@router.get("/me", response=MeOut)
def me(request):
    """Who the credentials belong to, their organizations and what they may do in each."""
    principal = request.auth
    orgs = [
        {
            "id": org.id,
            "slug": org.slug,
            "name": org.name,
            "is_personal": org.is_personal,
            "role": principal.role_in(org.id),
            "permissions": sorted(principal.permissions_in(org.id)),
        }
        for org in selectors.organizations_for(principal=principal)
    ]
    return {
        "kind": "api_key" if principal.api_key else "user",
        "email": principal.user.email if principal.user else None,
        "api_key_prefix": principal.api_key.prefix if principal.api_key else None,
        "project_limit": principal.project_limit,
        "organizations": orgs,
    }


class TeamRef(OutputSchema):
    id: UUID
    slug: str
    name: str


class ProjectOut(OutputSchema):
    id: UUID
    name: str
    slug: str
    description: str
    methodology: str
    organization: OrgOut
    team: TeamRef | None
    created_at: datetime


class ProjectIn(InputSchema):
    name: Name
    organization: str | None = Field(
        None, description="Slug or id; optional when the caller has one organization."
    )
    slug: str | None = Field(None, max_length=60, pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    description: str = Field("", max_length=2000)
    methodology: Methodology = Methodology.NATIVE
    team: str | None = Field(None, description="Team slug, for a project only that team's members see.")


@router.get("/projects", response=list[ProjectOut])
def projects_list(request):
    """Projects the caller can see."""
    return list(selectors.projects_for(principal=request.auth))


@router.post(
    "/projects",
    response={201: ProjectOut},
    openapi_extra=openapi_extra(
        conflict("The organization already has a project with the slug asked for (`slug_taken`)."),
        links(201, GetProject=link("GET", "/projects/{project_id}", project_id="$response.body#/id")),
    ),
)
def projects_create(request, payload: ProjectIn):
    """Create a project (needs the `admin` permission in its organization)."""
    principal = request.auth
    if payload.organization:
        organization = selectors.organization_get(principal=principal, ref=payload.organization)
    else:
        orgs = list(selectors.organizations_for(principal=principal)[:2])
        if len(orgs) != 1:
            raise Invalid("Say which organization the project belongs to.", details={"field": "organization"})
        organization = orgs[0]
    team = None
    if payload.team:
        team = selectors.teams_for(organization=organization).filter(slug=payload.team).first()
        if team is None:
            raise NotFound("No such team in this organization.", details={"field": "team"})
    project = services.project_create(
        organization=organization,
        actor=principal,
        name=payload.name,
        slug=payload.slug,
        description=payload.description,
        methodology=payload.methodology,
        team=team,
    )
    return Status(201, project)


@router.get("/projects/{project_id}", response=ProjectOut)
def projects_get(request, project_id: UUID):
    return selectors.project_get(principal=request.auth, project_id=project_id)


class ApiKeyOut(OutputSchema):
    id: UUID
    name: str
    prefix: str
    last_four: str
    display: str
    scopes: list[str]
    project_id: UUID | None
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None
    is_active: bool


class ApiKeyCreatedOut(ApiKeyOut):
    key: str = Field(description="The full key. It is shown once and cannot be recovered.")


class ApiKeyIn(InputSchema):
    name: Name
    scopes: list[str] = Field(min_length=1, json_schema_extra={"items": {"enum": list(API_KEY_SCOPES)}})
    project_id: UUID | None = None
    expires_at: datetime | None = Field(
        None, description="ISO 8601, in the future; a time without an offset is UTC."
    )

    @field_validator("expires_at")
    @classmethod
    def utc_unless_told(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        try:
            return value.replace(tzinfo=value.tzinfo or UTC).astimezone(UTC)
        except OverflowError:  # (9999-12-31T23:00-12:00 is in the year 10000 in UTC)
            raise ValueError("expires_at must fall before the year 10000 in UTC") from None

    @field_validator("scopes")
    @classmethod
    def known_scopes(cls, scopes: list[str]) -> list[str]:
        unknown = sorted(set(scopes) - set(API_KEY_SCOPES))
        if unknown:
            raise ValueError(f"unknown scopes {unknown}; allowed: {list(API_KEY_SCOPES)}")
        return scopes


def _admin_org(request, org: str):
    organization = selectors.organization_get(principal=request.auth, ref=org)
    services.require(request.auth, organization.id, Perm.ADMIN)
    return organization


@router.get("/orgs", response=list[OrgOut])
def orgs_list(request):
    return list(selectors.organizations_for(principal=request.auth))


@router.get("/orgs/{org}/api-keys", response=list[ApiKeyOut])
def api_keys_list(request, org: str):
    """Keys of the organization: prefix, last four characters, scopes, last use. Never the secret."""
    organization = _admin_org(request, org)
    return list(selectors.api_keys_for(principal=request.auth, organization=organization))


@router.post(
    "/orgs/{org}/api-keys",
    response={201: ApiKeyCreatedOut},
    openapi_extra=links(
        201,
        RevokeKey=link(
            "DELETE", "/orgs/{org}/api-keys/{key_id}", org="$request.path.org", key_id="$response.body#/id"
        ),
    ),
)
def api_keys_create(request, org: str, payload: ApiKeyIn):
    organization = _admin_org(request, org)
    project = None
    if payload.project_id:
        project = selectors.project_get(principal=request.auth, project_id=payload.project_id)
        if project.organization_id != organization.id:
            raise NotFound("No such project in this organization.", details={"field": "project_id"})
    api_key, full = services.api_key_create(
        organization=organization,
        actor=request.auth,
        name=payload.name,
        scopes=payload.scopes,
        project=project,
        expires_at=payload.expires_at,
    )
    api_key.key = full
    return Status(201, api_key)


@router.delete("/orgs/{org}/api-keys/{key_id}", response=ApiKeyOut)
def api_keys_revoke(request, org: str, key_id: UUID):
    """Revoke a key. It stops working at once; the row stays for the audit trail."""
    organization = _admin_org(request, org)
    api_key = selectors.api_key_get(principal=request.auth, organization=organization, key_id=key_id)
    return services.api_key_revoke(api_key=api_key, actor=request.auth)


class LimitOut(OutputSchema):
    per_minute: int
    burst: int


class UseOut(OutputSchema):
    used: float = Field(description="How full the bucket is, in requests (0: untouched).")
    remaining: int = Field(description="Requests of weight 1 that would pass now.")
    retry_after_seconds: int = Field(description="0, or how long until one more request passes.")


class OrgUseOut(LimitOut, UseOut):
    pass


class KeyUseOut(UseOut):
    id: UUID
    name: str
    prefix: str


class LimitsOut(OutputSchema):
    enabled: bool
    store: str = Field(description="Where the counters live: `redis` or `postgres`.")
    custom: bool = Field(description="Whether this organization has limits of its own, not the defaults.")
    weights: dict[str, int] = Field(description="What an expensive operation counts, in requests.")
    failed_auth_per_address: LimitOut
    organization: OrgUseOut
    per_key: LimitOut
    api_keys: list[KeyUseOut]


@router.get("/orgs/{org}/limits", response=LimitsOut)
def org_limits(request, org: str):
    """The organization's rate limits and how much of them it and each active key use now
    (admins). A request counts against its key's bucket, then its organization's."""
    organization = _admin_org(request, org)
    keys = selectors.api_keys_for(principal=request.auth, organization=organization).active()
    return usage_for(organization=organization, api_keys=keys)
