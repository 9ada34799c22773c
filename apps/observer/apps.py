from django.apps import AppConfig


class ObserverConfig(AppConfig):
    name = "apps.observer"
    label = "observer"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.memories.neighbours import register_neighbour_provider
        from apps.observer.selectors import coaccess_partners
        from memorysaas.kernel.schedules import register_schedule

        register_neighbour_provider(coaccess_partners)
        register_schedule("observer.cross_module", "apps.observer.tasks.cross_module_task", "W", lane="bulk")
        # Daily, beside the memories' prune: context-cost figures kept to the last 30 sessions' worth.
        register_schedule(
            "observer.context_cost_window", "apps.observer.tasks.context_cost_window_task", "D", lane="bulk"
        )
        # Every 15 minutes: a session whose finalize failed or was lost is queued again.
        register_schedule(
            "observer.finalize_stalled", "apps.observer.tasks.finalize_stalled_task", "I", minutes=15
        )
