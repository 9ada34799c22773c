from django.apps import AppConfig


class InsightsConfig(AppConfig):
    """Whether memory helps: the A/B experiment, its rollups and what is learned from them."""

    name = "apps.insights"
    label = "insights"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.insights.experiments import session_group
        from apps.insights.learning import weights_of
        from apps.insights.retrieval import boost_counted
        from apps.insights.snapshots import store_samples
        from apps.insights.telemetry import tightenings_of
        from apps.memories.boost_listeners import register_boost_listener
        from apps.memories.phase_weights import register_phase_weights_provider
        from apps.observer.abgroups import register_assigner
        from apps.observer.thresholds import register_tightening_provider
        from memorysaas.kernel.latency import register_sink
        from memorysaas.kernel.schedules import register_schedule

        register_assigner(session_group)
        register_boost_listener(boost_counted)
        register_phase_weights_provider(weights_of)
        register_tightening_provider(tightenings_of)
        # Every 5 minutes: the sessions finalized since the last run (incremental; a rerun
        # changes nothing). Daily: phase-weight proposals and threshold tightening.
        register_schedule("insights.rollup", "apps.insights.tasks.rollup_task", "I", minutes=5, lane="bulk")
        register_schedule("insights.learning", "apps.insights.tasks.learning_task", "D", lane="bulk")
        register_sink(store_samples)
        # Today's health snapshot of every project, rewritten each hour (the charts' history);
        # nobody waits for it, so it runs on the bulk lane.
        register_schedule(
            "insights.health_snapshots", "apps.insights.tasks_dash.health_snapshots_task", "H", lane="bulk"
        )
        # The weekly synthesis of every project, once a week for the last complete week.
        register_schedule("insights.weekly_synthesis", "apps.insights.tasks_dash.weekly_synthesis_task", "W")
