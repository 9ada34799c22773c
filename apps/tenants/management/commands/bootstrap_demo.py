"""Create (or find) a demo organization, owner, project and all-scopes API key; print them.

Idempotent: a second run reuses the org, user and project. The demo key's secret cannot be shown
again from the database (only its hash is kept), so without `--key-file` a second run revokes
the demo key and prints a new one. With `--key-file` (as `make run` passes, under `.data/`) the
key is kept in that file, readable by its owner only, and reused while it still works: an agent
or offline client set up with it keeps working across restarts.
"""

import os
from pathlib import Path

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
        parser.add_argument("--key-file", help="Keep the demo key here and reuse it while it works.")

    @transaction.atomic
    def handle(
        self, *args, org: str, email: str, password: str, project: str, key_file: str | None = None, **options
    ):
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

        full_key = _kept_key(key_file, demo_project)
        if full_key is None:
            for old in ApiKey.objects.for_org(organization).filter(name=DEMO_KEY_NAME).active():
                services.api_key_revoke(api_key=old, actor=principal)
            _, full_key = services.api_key_create(
                organization=organization,
                actor=principal,
                name=DEMO_KEY_NAME,
                scopes=API_KEY_SCOPES,
                project=demo_project,
            )
            if key_file:
                path = Path(key_file)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch(mode=0o600)
                path.chmod(0o600)
                path.write_text(full_key + "\n")

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


def _kept_key(key_file: str | None, project: Project) -> str | None:
    """The key kept in `key_file` if it is still the demo project's active demo key."""
    if not key_file or not Path(key_file).is_file():
        return None
    full = Path(key_file).read_text().strip()
    key = services.api_key_authenticate(full)
    if key is None or key.name != DEMO_KEY_NAME or key.project_id != project.id:
        return None
    return full
