from django.apps import AppConfig


class GovernanceConfig(AppConfig):
    name = "apps.governance"
    label = "governance"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from apps.governance.signals import on_feedback
        from apps.governance.trust import threshold_for
        from apps.memories.models import MemoryFeedback
        from apps.memories.thresholds import register_injection_threshold

        post_save.connect(on_feedback, sender=MemoryFeedback, dispatch_uid="governance_trust_offer")
        # The project's trust level sets how confident an injected memory must be.
        register_injection_threshold(threshold_for)
