from django.apps import AppConfig


class AgentsConfig(AppConfig):
    """Integrations through which coding agents reach the service (hooks, MCP)."""

    name = "apps.agents"
    label = "agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from memorysaas.kernel.schedules import register_schedule

        # Every 30 minutes: a hooks session whose SessionEnd never came (a killed terminal, a
        # lost delivery) is completed once it has been quiet long enough, so it still teaches.
        register_schedule("agents.idle_sessions", "apps.agents.tasks.idle_sessions_task", "I", minutes=30)
