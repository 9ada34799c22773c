"""Create (or find) a demo organization, owner, project and all-scopes API key; print them.

Idempotent: a second run reuses the org, user and project, and replaces the demo key (the old
secret cannot be shown again, so the previous demo key is revoked and a new one printed).
"""

import os

from django.core.management.base import BaseCommand
from django.db import transaction

from apps.tenants import services
from apps.tenants.models import ApiKey, Membership, Organization, Project, User
from apps.tenants.principal import Principal
from apps.tenants.roles import API_KEY_SCOPES, Role

DEMO_KEY_NAME = "Demo key (bootstrap_demo)"


class Command(BaseCommand):
    help = "Create the demo org/user/project/API key idempotently and print ORG=, PROJECT_ID=, API_KEY=, LOGIN=, PASSWORD=."

    def add_arguments(self, parser):
        parser.add_argument("--org", default="demo")
        parser.add_argument("--email", default="demo@memorysaas.local")
        parser.add_argument("--password", default=os.environ.get("DEMO_PASSWORD", "demo-password-123"))
        parser.add_argument("--project", default="demo-project")

    @transaction.atomic
    def handle(self, *args, org: str, email: str, password: str, project: str, **options):
        user = User.objects.filter(email__iexact=email).first()
        if user is None:
            user = User.objects.create_user(email=email, password=password, name="Demo Owner")
        else:
            user.set_password(password)
            user.save(update_fields=["password"])
        self._verify_email(user)

        organization = Organization.objects.filter(slug=org).first()
        if organization is None:
            organization = services.organization_create(
                name=org.replace("-", " ").title(), slug=org, owner=user
            )
        Membership.objects.update_or_create(
            organization=organization, user=user, defaults={"role": Role.OWNER}
        )
        principal = Principal(user=user, roles={organization.id: Role.OWNER})

        demo_project = Project.objects.filter(organization=organization, slug=project).first()
        if demo_project is None:
            demo_project = services.project_create(
                organization=organization,
                actor=principal,
                name=project.replace("-", " ").title(),
                slug=project,
            )

        for old in ApiKey.objects.for_org(organization).filter(name=DEMO_KEY_NAME).active():
            services.api_key_revoke(api_key=old, actor=principal)
        _, full_key = services.api_key_create(
            organization=organization,
            actor=principal,
            name=DEMO_KEY_NAME,
            scopes=API_KEY_SCOPES,
            project=demo_project,
        )

        self.stdout.write(f"ORG={organization.slug}")
        self.stdout.write(f"PROJECT_ID={demo_project.id}")
        self.stdout.write(f"PROJECT_SLUG={demo_project.slug}")
        self.stdout.write(f"API_KEY={full_key}")
        self.stdout.write(f"LOGIN={user.email}")
        self.stdout.write(f"PASSWORD={password}")

    @staticmethod
    def _verify_email(user: User) -> None:
        from allauth.account.models import EmailAddress

        EmailAddress.objects.update_or_create(
            user=user, email=user.email, defaults={"verified": True, "primary": True}
        )
