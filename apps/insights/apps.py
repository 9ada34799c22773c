from django.apps import AppConfig


class InsightsConfig(AppConfig):
    name = "apps.insights"
    label = "insights"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.insights.snapshots import store_samples
        from memorysaas.kernel.latency import register_sink
        from memorysaas.kernel.schedules import register_schedule

        register_sink(store_samples)
        # Today's health snapshot of every project, rewritten each hour (the charts' history).
        register_schedule("insights.health_snapshots", "apps.insights.tasks_dash.health_snapshots_task", "H")
        # The weekly synthesis of every project, Monday morning for the week before.
        register_schedule("insights.weekly_synthesis", "apps.insights.tasks_dash.weekly_synthesis_task", "W")
