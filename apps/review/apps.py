from django.apps import AppConfig


class ReviewConfig(AppConfig):
    name = "apps.review"
    label = "review"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.review.conflict_notices import notify_conflict_waiting
        from apps.sync.conflicts import on_conflict_waiting

        on_conflict_waiting(notify_conflict_waiting)
