"""The operator's side of tenancy in the Django admin: organizations' own rate limits."""

from django.contrib import admin

from apps.tenants.models import OrganizationLimits


@admin.register(OrganizationLimits)
class OrganizationLimitsAdmin(admin.ModelAdmin):
    list_display = (
        "organization",
        "key_per_minute",
        "key_burst",
        "org_per_minute",
        "org_burst",
        "updated_at",
    )
    search_fields = ("organization__slug", "organization__name")
    raw_id_fields = ("organization",)
