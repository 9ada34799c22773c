from django.apps import AppConfig


class MemoriesConfig(AppConfig):
    name = "apps.memories"
    label = "memories"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.memories import checks  # noqa: F401  (registers the system checks)
        from apps.memories.neighbours import co_mentioned_files, register_neighbour_provider

        register_neighbour_provider(co_mentioned_files)

        from apps.memories.teams import follow_project_team
        from apps.tenants.teams import on_project_team_changed

        on_project_team_changed(follow_project_team)

        from django.db.backends.signals import connection_created

        from apps.memories.vectors import set_session_search_params

        connection_created.connect(set_session_search_params, dispatch_uid="memories.hnsw_session_params")

        from django.db.models.signals import post_migrate

        from apps.memories.vectors import ensure_provider_index

        # The configured provider's HNSW index (migration 0002 makes MiniLM's 384).
        post_migrate.connect(ensure_provider_index, sender=self, dispatch_uid="memories.provider_index")

        from memorysaas.kernel.schedules import register_schedule

        # Daily: deprecate after three half-lives unused, delete after the grace, evict the cache.
        register_schedule(
            "memories.decay_and_prune", "apps.memories.tasks.decay_and_prune_task", "D", lane="bulk"
        )
        # Every 5 minutes: memories left pending (their embedding task was lost) are queued again.
        # On the bulk lane, so it runs behind the embeddings already queued there, not beside
        # them queuing again memories that only wait their turn.
        register_schedule(
            "memories.embed_stranded", "apps.memories.tasks.embed_stranded_task", "I", minutes=5, lane="bulk"
        )
        # Every 15 minutes: feedback whose propagation task was lost is queued again.
        register_schedule(
            "memories.propagations_stranded",
            "apps.memories.tasks.propagations_stranded_task",
            "I",
            minutes=15,
        )
