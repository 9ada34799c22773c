from django.apps import AppConfig
from django.contrib.auth.signals import user_logged_out
from django.db.models import Q
from django.db.models.signals import post_migrate, post_save, pre_delete, pre_save
from django.utils import timezone


def _close_their_sockets(sender, request, user, **kwargs) -> None:
    """Signed out: the sockets that browser session opened close."""
    from memorysaas.kernel.realtime import session_ended

    session = getattr(request, "session", None)
    session_ended(session.session_key if session is not None else None)


def _revoke_their_keys(sender, instance, **kwargs) -> None:
    """A key acts for its maker (or its device's owner); deleted any way — the admin, a shell,
    not only the erasure — they would leave it acting for no one, with its scopes unbounded."""
    from apps.tenants.models import ApiKey, Membership
    from memorysaas.kernel.realtime import access_changed

    ApiKey.objects.filter(Q(created_by=instance) | Q(device__user=instance), revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    # Their open pages and their keys' sockets check again (and close) once the deletion commits.
    for org_id in Membership.objects.filter(user=instance).values_list("organization_id", flat=True):
        access_changed(org_id)


def _project_ids(organization_id) -> list:
    from apps.tenants.models import Project

    return list(Project.objects.filter(organization_id=organization_id).values_list("id", flat=True))


def _note_sign_in_change(sender, instance, update_fields=None, raw=False, using=None, **kwargs) -> None:
    """Before a person is saved: does the save change their password or deactivate them?"""
    instance._sign_in_changed = False  # (not left over from a save that failed)
    if raw or instance.pk is None:
        return  # loaddata, or a new person
    if update_fields is not None and not {"password", "is_active"} & set(update_fields):
        return  # a save that leaves both alone (e.g. last_login at each sign-in)
    stored = sender._base_manager.db_manager(using).filter(pk=instance.pk)
    before = stored.values_list("password", "is_active").first()
    instance._sign_in_changed = before is not None and before != (instance.password, instance.is_active)


def _recheck_their_sockets(sender, instance, **kwargs) -> None:
    """A new password signs out the person's other sessions and a deactivated person is signed
    out everywhere: their open sockets check again once the save commits (the consumer re-reads
    the user from the session, so a session the change invalidated closes; so do the sockets
    of a deactivated person's keys)."""
    from apps.tenants.models import Membership
    from memorysaas.kernel.realtime import access_changed

    if not instance.__dict__.pop("_sign_in_changed", False):
        return
    for org_id in Membership.objects.filter(user=instance).values_list("organization_id", flat=True):
        access_changed(org_id)


class TenantsConfig(AppConfig):
    name = "apps.tenants"
    label = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from memorysaas.kernel.pgtimestamps import use_c_timestamptz_loader
        from memorysaas.kernel.realtime import register_projects_of
        from memorysaas.kernel.schedules import ensure_schedules, register_schedule

        # The kernel's realtime helper finds an organization's projects through this lookup.
        register_projects_of(_project_ids)
        connection_created.connect(use_c_timestamptz_loader, dispatch_uid="memorysaas.c_timestamptz_loader")

        register_schedule(
            "tenants.deletions", "apps.tenants.tasks.deletions_process_due_task", "D", lane="bulk"
        )
        register_schedule(
            "tenants.ratelimit_sweep", "apps.tenants.ratelimit.tasks.sweep_task", "I", minutes=15
        )
        # Every 5 minutes: an export whose task was lost is queued again.
        register_schedule(
            "tenants.exports_stranded", "apps.tenants.tasks.exports_stranded_task", "I", minutes=5
        )
        post_migrate.connect(ensure_schedules, dispatch_uid="memorysaas.ensure_schedules")
        user_logged_out.connect(_close_their_sockets, dispatch_uid="tenants.close_sockets")
        pre_delete.connect(
            _revoke_their_keys, sender=self.get_model("User"), dispatch_uid="tenants.revoke_keys"
        )
        user = self.get_model("User")
        pre_save.connect(_note_sign_in_change, sender=user, dispatch_uid="tenants.note_sign_in_change")
        post_save.connect(_recheck_their_sockets, sender=user, dispatch_uid="tenants.recheck_sockets")
