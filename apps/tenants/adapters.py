"""django-allauth hooks: every new account gets a workspace of its own."""

from allauth.account.adapter import DefaultAccountAdapter
from django.db import transaction


class AccountAdapter(DefaultAccountAdapter):
    def save_user(self, request, user, form, commit=True):
        from apps.tenants.services import personal_workspace_create

        with transaction.atomic():  # an account without its workspace is never left behind
            user = super().save_user(request, user, form, commit=commit)
            if commit:
                personal_workspace_create(user=user)
        return user
