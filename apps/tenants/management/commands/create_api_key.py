"""Create an API key from the command line and print it once."""

from django.core.management.base import BaseCommand, CommandError

from apps.tenants import services
from apps.tenants.models import Membership, Organization, Project
from apps.tenants.principal import Principal
from apps.tenants.roles import API_KEY_SCOPES, Role
from memorysaas.kernel.errors import ApiError
from memorysaas.kernel.ids import as_uuid


class Command(BaseCommand):
    help = "Create an API key; the full key is printed once and cannot be recovered."

    def add_arguments(self, parser):
        parser.add_argument("--org", required=True, help="Organization slug")
        parser.add_argument("--project", help="Limit the key to this project (id or slug)")
        parser.add_argument(
            "--scopes",
            default="memories:read,memories:write,observer:write",
            help=f"Comma-separated, from {','.join(API_KEY_SCOPES)}",
        )
        parser.add_argument("--name", default="CLI key")

    def handle(self, *args, org, project, scopes, name, **options):
        organization = Organization.objects.filter(slug=org).first()
        if organization is None:
            raise CommandError(f"No organization with slug {org!r}.")
        owner = (
            Membership.objects.for_org(organization).filter(role=Role.OWNER).select_related("user").first()
        )
        principal = Principal(user=owner.user if owner else None, roles={organization.id: Role.OWNER})
        target = None
        if project:
            qs = Project.objects.for_org(organization)
            target = qs.filter(slug=project).first() or (
                qs.filter(id=as_id).first() if (as_id := as_uuid(project)) else None
            )
            if target is None:
                raise CommandError(f"No project {project!r} in {org}.")
        try:
            _, full = services.api_key_create(
                organization=organization,
                actor=principal,
                name=name,
                scopes=[s.strip() for s in scopes.split(",") if s.strip()],
                project=target,
            )
        except ApiError as exc:
            raise CommandError(f"{exc.message} {exc.details or ''}") from None
        self.stdout.write(full)
