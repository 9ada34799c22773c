from django.apps import AppConfig


class SyncConfig(AppConfig):
    name = "apps.sync"
    label = "sync"
    default_auto_field = "django.db.models.BigAutoField"
