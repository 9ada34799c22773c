from django.apps import AppConfig


class MemoriesConfig(AppConfig):
    name = "apps.memories"
    label = "memories"
    default_auto_field = "django.db.models.BigAutoField"
