from django.apps import AppConfig
from django.db.models.signals import post_migrate


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    label = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from memorysaas.pgtimestamps import use_c_timestamptz_loader
        from memorysaas.schedules import ensure_schedules, register_schedule

        connection_created.connect(use_c_timestamptz_loader, dispatch_uid="memorysaas.c_timestamptz_loader")

        register_schedule("tenants.deletions", "apps.tenants.tasks.deletions_process_due_task", "D")
        post_migrate.connect(ensure_schedules, dispatch_uid="memorysaas.ensure_schedules")
