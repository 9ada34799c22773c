from django.apps import AppConfig


class GraphConfig(AppConfig):
    name = "apps.graph"
    label = "graph"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.graph.selectors import neighbour_files
        from apps.memories.neighbours import register_neighbour_provider

        register_neighbour_provider(neighbour_files)

        from memorysaas.kernel.schedules import register_schedule

        # Every 5 minutes: an index job whose task was lost is queued again (apps/graph/tasks.py).
        register_schedule("graph.index_stranded", "apps.graph.tasks.index_stranded_task", "I", minutes=5)
