from django.apps import AppConfig


class BenchConfig(AppConfig):
    """Benchmarks and evaluations: management commands and the corpora they replay; no models."""

    name = "apps.bench"
    label = "bench"
    default_auto_field = "django.db.models.BigAutoField"
