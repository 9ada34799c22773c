from django.apps import AppConfig


class ObserverConfig(AppConfig):
    name = "apps.observer"
    label = "observer"
    default_auto_field = "django.db.models.BigAutoField"
