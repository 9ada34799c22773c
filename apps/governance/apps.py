from django.apps import AppConfig


class GovernanceConfig(AppConfig):
    name = "apps.governance"
    label = "governance"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from apps.governance.signals import on_feedback
        from apps.memories.models import MemoryFeedback

        post_save.connect(on_feedback, sender=MemoryFeedback, dispatch_uid="governance_trust_offer")
