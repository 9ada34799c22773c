"""Organizations, teams, projects, people, keys and devices — the tenancy every other app hangs on.

Every tenant-owned row carries its organization. Reads start from the scoped querysets below
(`for_org`, `for_project`, `visible_to`), so "does not exist" and "not yours" are the same 404.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser, BaseUserManager
from django.contrib.auth.models import PermissionsMixin
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone

from apps.tenants.roles import API_KEY_SCOPES, Role

if TYPE_CHECKING:
    from apps.tenants.principal import Principal


class UserManager(BaseUserManager["User"]):
    use_in_migrations = True

    def create_user(self, email: str, password: str | None = None, **extra) -> User:
        if not email:
            raise ValueError("An email address is required.")
        user = self.model(email=self.normalize_email(email).lower(), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_superuser(self, email: str, password: str | None = None, **extra) -> User:
        extra.update(is_staff=True, is_superuser=True)
        return self.create_user(email, password, **extra)


class User(AbstractBaseUser, PermissionsMixin):
    email = models.EmailField(unique=True)
    name = models.CharField(max_length=150, blank=True)
    is_active = models.BooleanField(default=True)
    is_staff = models.BooleanField(default=False)
    date_joined = models.DateTimeField(default=timezone.now)
    # Account deletion: set when requested; the hard delete runs after the grace period.
    deletion_requested_at = models.DateTimeField(null=True, blank=True)

    objects = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    def __str__(self) -> str:
        return self.email

    @property
    def display_name(self) -> str:
        return self.name or self.email.split("@")[0]


class TenantQuerySet(models.QuerySet):
    """Base for every tenant-owned model. Subclasses say how `visible_to` narrows them."""

    organization_field = "organization"

    def for_org(self, organization) -> TenantQuerySet:
        return self.filter(**{self.organization_field: organization})

    def visible_to(self, principal: Principal) -> TenantQuerySet:
        return self.filter(**{f"{self.organization_field}__in": principal.org_ids})


class ProjectScopedQuerySet(TenantQuerySet):
    """For models that belong to a project: visible when the project is."""

    project_field = "project"

    def for_project(self, project) -> ProjectScopedQuerySet:
        return self.filter(**{self.project_field: project})

    def visible_to(self, principal: Principal) -> ProjectScopedQuerySet:
        visible_projects = Project.objects.visible_to(principal).values("id")
        return self.filter(**{f"{self.project_field}__in": visible_projects})


class OrganizationQuerySet(models.QuerySet):
    def visible_to(self, principal: Principal) -> OrganizationQuerySet:
        return self.filter(id__in=principal.org_ids)


class Organization(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=60, unique=True)
    is_personal = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    deletion_requested_at = models.DateTimeField(null=True, blank=True)

    objects = OrganizationQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(
        max_length=16, choices=[(r.value, r.value.title()) for r in Role], default=Role.MEMBER
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "user"], name="one_membership_per_org")
        ]
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} as {self.role}"


class Team(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="teams")
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=60)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "slug"], name="team_slug_unique_in_org")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TeamMembership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="team_memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_team_membership")]

    def __str__(self) -> str:
        return f"{self.user_id} in team {self.team_id}"


class ProjectQuerySet(TenantQuerySet):
    def for_project(self, project) -> ProjectQuerySet:
        return self.filter(id=getattr(project, "id", project))

    def visible_to(self, principal: Principal) -> ProjectQuerySet:
        """A person sees the org's projects that belong to no team or to one of their teams —
        admins and owners see them all. A key sees what the person it acts for sees in its org
        (all of it when no person made it), or only its one project of those."""
        qs = self
        if principal.api_key is not None:
            qs = self.filter(organization_id=principal.api_key.organization_id)
            if principal.project_limit is not None:
                qs = qs.filter(id=principal.project_limit)
            if principal.user is None:
                return qs
        if not principal.roles:
            return self.none()
        wide_orgs = [org for org in principal.roles if principal.sees_all_projects_of(org)]
        return qs.filter(organization_id__in=list(principal.roles)).filter(
            Q(organization_id__in=wide_orgs) | Q(team__isnull=True) | Q(team_id__in=list(principal.team_ids))
        )


class Methodology(models.TextChoices):
    NATIVE = "native", "Native"
    BMAD = "bmad", "BMAD"
    TDD = "tdd", "TDD"


class Project(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="projects")
    team = models.ForeignKey(Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="projects")
    name = models.CharField(max_length=120)
    slug = models.SlugField(max_length=60)
    description = models.TextField(blank=True)
    methodology = models.CharField(max_length=16, choices=Methodology.choices, default=Methodology.NATIVE)
    repository_url = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    # Monotonic counter for live-update messages so clients can detect gaps.
    event_seq = models.BigIntegerField(default=0)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "slug"], name="project_slug_unique_in_org")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.organization.slug}/{self.slug}"


class InvitationQuerySet(TenantQuerySet):
    def pending(self) -> InvitationQuerySet:
        return self.filter(accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now())


class Invitation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(
        max_length=16, choices=[(r.value, r.value.title()) for r in Role], default=Role.MEMBER
    )
    # Only a hash of the emailed token is kept: a leaked table accepts no invitation.
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = InvitationQuerySet.as_manager()

    INVITATION_TTL = timedelta(days=7)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.email} → {self.organization_id} as {self.role}"

    @staticmethod
    def hash_token(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    @property
    def is_pending(self) -> bool:
        return self.accepted_at is None and self.revoked_at is None and self.expires_at > timezone.now()


_KEY_ALPHABET = string.ascii_letters + string.digits
_PREFIX_ALPHABET = string.ascii_lowercase + string.digits
KEY_PREFIX_LENGTH = 8
KEY_SECRET_LENGTH = 40


def hash_api_secret(secret: str) -> str:
    return hmac.new(settings.API_KEY_HMAC_KEY.encode(), secret.encode(), hashlib.sha256).hexdigest()


class ApiKeyQuerySet(TenantQuerySet):
    def active(self) -> ApiKeyQuerySet:
        return self.filter(revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
        )

    def visible_to(self, principal: Principal) -> ApiKeyQuerySet:
        qs = super().visible_to(principal)
        if principal.project_limit is not None:
            qs = qs.filter(project_id=principal.project_limit)
        return qs


class ApiKey(models.Model):
    """`msk_<prefix>_<secret>`: the prefix finds the row, a keyed hash of the secret proves it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="api_keys")
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, null=True, blank=True, related_name="api_keys"
    )
    name = models.CharField(max_length=120)
    prefix = models.CharField(max_length=KEY_PREFIX_LENGTH, unique=True)
    secret_hash = models.CharField(max_length=64)
    last_four = models.CharField(max_length=4)
    scopes = ArrayField(
        models.CharField(max_length=32, choices=[(s, s) for s in API_KEY_SCOPES]), default=list
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="api_keys"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiKeyQuerySet.as_manager()

    LAST_USED_RESOLUTION = timedelta(minutes=1)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"msk_{self.prefix}_…{self.last_four}"

    @classmethod
    def generate(cls) -> tuple[str, str, str]:
        """Returns (full key, prefix, secret). The full key is shown once and never stored."""
        prefix = "".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(KEY_PREFIX_LENGTH))
        secret = "".join(secrets.choice(_KEY_ALPHABET) for _ in range(KEY_SECRET_LENGTH))
        return f"msk_{prefix}_{secret}", prefix, secret

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(self.secret_hash, hash_api_secret(secret))

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    @property
    def display(self) -> str:
        return str(self)

    @property
    def acting_user(self) -> User | None:
        device = getattr(self, "device", None)
        return device.user if device is not None else self.created_by


class Device(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="devices")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="devices")
    name = models.CharField(max_length=120)
    platform = models.CharField(max_length=60, blank=True)
    api_key = models.OneToOneField(ApiKey, on_delete=models.CASCADE, related_name="device")
    created_at = models.DateTimeField(auto_now_add=True)
    last_sync_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AuditLog(models.Model):
    """Who did what to which object. Metadata is scrubbed of secrets before it is written."""

    organization = models.ForeignKey(Organization, on_delete=models.SET_NULL, null=True, related_name="+")
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    actor_api_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, related_name="+")
    actor_label = models.CharField(max_length=120)
    action = models.CharField(max_length=80)
    target_type = models.CharField(max_length=60, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.actor_label} {self.action} {self.target_type}:{self.target_id}"


class ExportFormat(models.TextChoices):
    JSON = "json", "JSON (complete, machine-readable)"
    MARKDOWN = "markdown", "Markdown"
    CLAUDE_MD = "claude_md", "CLAUDE.md"


class ExportStatus(models.TextChoices):
    PENDING = "pending", "Queued"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"
    EXPIRED = "expired", "Expired"


class DataExportQuerySet(models.QuerySet):
    def of_user(self, user) -> DataExportQuerySet:
        return self.filter(requested_by=user)


class DataExport(models.Model):
    """A person's or an organization's data, built by a task and downloaded through a link that
    expires. The archive lives in the row until it expires; then only the record remains."""

    TTL = timedelta(days=7)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="data_exports"
    )
    # Null for a personal export; set when an owner exports the whole organization.
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, null=True, blank=True, related_name="data_exports"
    )
    format = models.CharField(max_length=12, choices=ExportFormat.choices, default=ExportFormat.JSON)
    status = models.CharField(max_length=8, choices=ExportStatus.choices, default=ExportStatus.PENDING)
    filename = models.CharField(max_length=200, blank=True)
    content = models.BinaryField(null=True, blank=True, editable=False)
    size_bytes = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)

    objects = DataExportQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"export {self.id} ({self.format}, {self.status})"

    @property
    def subject(self) -> str:
        return self.organization.name if self.organization_id else self.requested_by.email

    @property
    def is_downloadable(self) -> bool:
        return (
            self.status == ExportStatus.READY
            and self.expires_at is not None
            and self.expires_at > timezone.now()
        )


class OrganizationLimits(models.Model):
    """An organization's own request-rate limits, set by the service's operator (the Django admin
    or `manage.py org_limits`). An empty field keeps the default from settings (RATE_LIMIT_*)."""

    organization = models.OneToOneField(
        Organization, on_delete=models.CASCADE, primary_key=True, related_name="limits"
    )
    key_per_minute = models.PositiveIntegerField(null=True, blank=True, help_text="Per API key or person.")
    key_burst = models.PositiveIntegerField(null=True, blank=True)
    org_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text="All of the organization's keys together."
    )
    org_burst = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "organization limits"
        constraints = [
            models.CheckConstraint(condition=Q(**{f"{name}__gte": 1}), name=f"limits_{name}_positive")
            for name in ("key_per_minute", "key_burst", "org_per_minute", "org_burst")
        ]

    def __str__(self) -> str:
        return f"limits of {self.organization_id}"


class RateLimitBucket(models.Model):
    """One rate-limit counter of the PostgreSQL store (apps/tenants/ratelimit/stores.py): the time,
    in epoch seconds, at which the bucket is empty again. Written by one UPSERT per request, so
    every process shares it; the table is unlogged (a crash that empties it forgives everyone)."""

    key = models.CharField(max_length=200, primary_key=True)
    tat = models.FloatField()
    allowed = models.BooleanField(default=True)
    checked_at = models.FloatField()

    def __str__(self) -> str:
        return self.key


class DeviceAuthorizationStatus(models.TextChoices):
    PENDING = "pending", "Waiting for approval"
    APPROVED = "approved", "Approved"
    DENIED = "denied", "Denied"
    ISSUED = "issued", "Key issued"


class DeviceAuthorization(models.Model):
    """One `memorysaas login` in progress (RFC 8628): the device polls with its device code, a
    signed-in person approves it by the short user code. Only hashes of both codes are kept, and
    the device's key is made when the device collects it, so no secret sits in this table."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    device_code_hash = models.CharField(max_length=64, unique=True)
    user_code_hash = models.CharField(max_length=64, unique=True)
    client_id = models.CharField(max_length=60)
    device_name = models.CharField(max_length=120)
    platform = models.CharField(max_length=60, blank=True)
    status = models.CharField(
        max_length=16, choices=DeviceAuthorizationStatus.choices, default=DeviceAuthorizationStatus.PENDING
    )
    interval = models.PositiveIntegerField()  # seconds between polls; `slow_down` raises it
    last_polled_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    # Set by the person who approves (or denies): where the device's key will act, and as whom.
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    device = models.ForeignKey(Device, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"login of {self.device_name} ({self.status})"

    @property
    def is_expired(self) -> bool:
        return self.expires_at <= timezone.now()


class OnboardingSurface(models.TextChoices):
    DASHBOARD = "dashboard", "First dashboard visit"
    AGENT = "agent", "First agent session"


class OnboardingServed(models.Model):
    """A newcomer was shown a project's most important memories on one surface: once each, so
    the row is the "once". (Which memories: apps/memories/onboarding.py.)"""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    surface = models.CharField(max_length=12, choices=OnboardingSurface.choices)
    memory_ids = models.JSONField(default=list)
    served_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "project", "surface"], name="onboarding_once_per_surface")
        ]

    def __str__(self) -> str:
        return f"onboarding of {self.user_id} in {self.project_id} ({self.surface})"
