from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "apps.webhooks"
    label = "webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.webhooks.services import on_event
        from memorysaas.kernel.events import subscribe
        from memorysaas.kernel.schedules import register_schedule

        subscribe(on_event)
        # Deliveries whose retry time has come (a failed attempt waits 30 s, 1, 2, 4 … minutes).
        register_schedule("webhooks.retries", "apps.webhooks.tasks.deliver_due_task", "I", minutes=1)
