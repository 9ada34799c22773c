"""What the hooks endpoint keeps beside the observer's session.

- `HookSession`: one agent session the hooks opened (its observer session, found by the agent's
  own id, `Session.external_id`): the counters that number its events (`last_seq`, assigned
  here, since Claude Code numbers nothing) and its tool calls (`tool_steps`: a tool call is one
  step), and the step and verdict of the test run that is the session's validation.
- `HookDelivery`: what each delivery added, once: `key` names it (`call:<tool_use_id>`,
  `result:<tool_use_id>`, `stop:<digest>`), so a delivery that comes again, or a PreToolUse
  that arrives after its PostToolUse, adds nothing; `step` pairs a tool's result with its call.
"""

from __future__ import annotations

from django.db import models

from apps.tenants.models import ProjectScopedQuerySet


class HookSession(models.Model):
    session = models.OneToOneField(
        "observer.Session", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    agent = models.CharField(max_length=40, default="claude-code")
    last_seq = models.PositiveBigIntegerField(default=0)
    tool_steps = models.PositiveIntegerField(default=0)
    # The step of the latest test run whose verdict was recorded: an earlier one that arrives
    # late does not overturn it.
    validated_step = models.PositiveIntegerField(null=True, blank=True)
    validation_passed = models.BooleanField(null=True, blank=True)
    last_delivery_at = models.DateTimeField(auto_now=True)

    objects = ProjectScopedQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.agent} hooks of {self.session_id}"


class HookDelivery(models.Model):
    hook_session = models.ForeignKey(HookSession, on_delete=models.CASCADE, related_name="+", db_index=False)
    key = models.CharField(max_length=120)
    step = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["hook_session", "key"], name="agents_delivery_once")]

    def __str__(self) -> str:
        return f"{self.key} at step {self.step}"
