from django.apps import AppConfig


class AgentsConfig(AppConfig):
    """Integrations through which coding agents reach the service (hooks, MCP)."""

    name = "apps.agents"
    label = "agents"
    default_auto_field = "django.db.models.BigAutoField"
