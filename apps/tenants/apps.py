from django.apps import AppConfig
from django.db.models.signals import post_migrate


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    label = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from memorysaas.schedules import ensure_schedules, register_schedule

        register_schedule("tenants.deletions", "apps.tenants.tasks.deletions_process_due_task", "D")
        post_migrate.connect(ensure_schedules, dispatch_uid="memorysaas.ensure_schedules")
