"""Show or set an organization's own rate limits: `manage.py org_limits acme --key-per-minute 1200`.

With no option it prints the limits in force; `--reset` returns the organization to the defaults
(RATE_LIMIT_* settings). Options left out keep their current value.
"""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.tenants import services
from apps.tenants.models import Organization, OrganizationLimits
from apps.tenants.principal import SYSTEM
from apps.tenants.ratelimit import policy
from memorysaas.kernel.errors import ApiError


class Command(BaseCommand):
    help = "Show or set an organization's rate limits (requests per minute and bursts)."

    def add_arguments(self, parser):
        parser.add_argument("org", help="The organization's slug.")
        for name in services.LIMIT_FIELDS:
            parser.add_argument(f"--{name.replace('_', '-')}", type=int, dest=name)
        parser.add_argument("--reset", action="store_true", help="Back to the defaults.")

    def handle(self, *args, org: str, reset: bool = False, **options):
        organization = Organization.objects.filter(slug=org).first()
        if organization is None:
            raise CommandError(f"No organization with the slug {org!r}.")
        given = {name: options[name] for name in services.LIMIT_FIELDS if options.get(name) is not None}
        if reset or given:
            current = OrganizationLimits.objects.filter(organization=organization).first()
            limits = {} if reset else {name: getattr(current, name, None) for name in services.LIMIT_FIELDS}
            try:
                services.organization_limits_set(
                    organization=organization, actor=SYSTEM, limits={**limits, **given}
                )
            except ApiError as error:
                raise CommandError(error.message) from None
            except ValidationError as error:
                raise CommandError("; ".join(error.messages)) from None
        limits = policy.limits_of(organization)
        origin = "its own" if limits.custom else "the defaults"
        self.stdout.write(
            f"{organization.slug} ({origin}): per key {limits.per_key.per_minute}/min, burst"
            f" {limits.per_key.burst}; organization {limits.organization.per_minute}/min, burst"
            f" {limits.organization.burst}"
        )
