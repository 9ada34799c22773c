from django.apps import AppConfig


class InsightsConfig(AppConfig):
    name = "apps.insights"
    label = "insights"
    default_auto_field = "django.db.models.BigAutoField"
