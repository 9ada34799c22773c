from django.apps import AppConfig


class MemoriesConfig(AppConfig):
    name = "apps.memories"
    label = "memories"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.memories.neighbours import co_mentioned_files, register_neighbour_provider

        register_neighbour_provider(co_mentioned_files)
