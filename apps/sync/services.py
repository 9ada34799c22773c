"""Applying what a device pushes: new memories, edits made offline, deletions.

Conflict policy: an edit based on the current version applies as is. An edit
based on an older version is merged field by field against the version it was based on (kept in
the memory's history): list fields (tags, files, modules) are united; any other field applies if
only the device changed it; a field both sides changed to different values is a conflict, and
then nothing of that edit is applied — the device gets the server's copy and asks its user.
A create carries a device-chosen `ref`, so a retried push does not create twice. A change that
is not valid comes back `invalid` with the reason, and the rest of the push applies.
"""

from __future__ import annotations

from typing import Any

from annotated_types import MaxLen
from django.db import transaction
from django.utils import timezone

from apps.memories import selectors as memory_selectors
from apps.memories.models import Memory
from apps.memories.selectors import steward_fields
from apps.memories.services import memory_create, memory_delete, memory_locked, memory_update
from apps.memories.validation import MemoryDraft
from apps.sync.models import PushRef
from apps.sync.selectors import memory_payload
from apps.tenants.models import Device, Project
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from memorysaas.kernel.errors import Conflict, Invalid, NotFound
from memorysaas.kernel.locks import hold_until_commit

UNION_FIELDS = ("tags", "related_files", "related_modules")
# Fields whose value at each version the history keeps, so a three-way merge is possible.
HISTORY_FIELDS = ("content", "type", "confidence", "tags", "related_files")


def _max_items(name: str) -> int:
    """How many entries a memory's list field holds at most (the draft's limit)."""
    return next(m.max_length for m in MemoryDraft.model_fields[name].metadata if isinstance(m, MaxLen))


def _result(status: str, **fields: Any) -> dict[str, Any]:
    return {"status": status, **fields}


def invalid_result(named: dict[str, str], message: str, *, details: Any = None) -> dict[str, Any]:
    """A change that cannot apply as sent (`named`: its ref or id): nothing of it applies, and
    the device learns why instead of the whole push being refused for it."""
    return _result("invalid", **named, message=message, details=details)


def _base_values(memory: Memory, base_version: int) -> dict[str, Any] | None:
    snapshot = memory_selectors.memory_version_get(memory=memory, version=base_version)
    if snapshot is None:
        return None
    return {name: getattr(snapshot, name) for name in HISTORY_FIELDS}


def merge(memory: Memory, base_version: int, fields: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Three-way merge of a stale edit. Returns (changes to apply, conflicting field names)."""
    base = _base_values(memory, base_version) or {}
    changes: dict[str, Any] = {}
    conflicts: list[str] = []
    for name, mine in fields.items():
        theirs = getattr(memory, name)
        if name in UNION_FIELDS:
            union = list(dict.fromkeys([*theirs, *mine]))
            if len(union) > _max_items(name):
                conflicts.append(name)  # both sides added: together, more than a memory holds
            else:
                changes[name] = union
        elif mine == theirs:
            continue
        elif name in base and base[name] == theirs:
            changes[name] = mine  # only the device changed it
        else:
            conflicts.append(name)
    return changes, conflicts


def _ref_owner(project: Project, actor: Principal, ref: str) -> dict[str, Any]:
    return {
        "api_key_id": actor.api_key.id if actor.api_key else None,
        "user_id": actor.user.pk if actor.user else None,
        "project": project,
        "ref": ref,
    }


def _ref_lock(owner: dict[str, Any]) -> str:
    return f"pushref:{owner['api_key_id']}:{owner['user_id']}:{owner['project'].id}:{owner['ref']}"


def _create(project: Project, actor: Principal, change: dict[str, Any]) -> dict[str, Any]:
    """(Under the ref's lock, which push_apply took: two pushes of one new ref at once — a retry
    racing the original — would both find no ref and both create.)"""
    ref = change["ref"]
    owner = _ref_owner(project, actor, ref)
    known = PushRef.objects.filter(**owner).select_related("memory").first()
    if known is not None:
        return _result("applied", ref=ref, id=str(known.memory_id), version=known.memory.version)
    memory = memory_create(project=project, actor=actor, draft=change["memory"])
    PushRef.objects.create(**owner, memory=memory)
    return _result("applied", ref=ref, id=str(memory.id), version=memory.version)


def _update(memory: Memory, actor: Principal, change: dict[str, Any]) -> dict[str, Any]:
    fields, base_version = change["fields"], change["base_version"]
    if base_version == memory.version:
        memory = memory_update(memory=memory, actor=actor, changes=fields, change="synced")
        return _result("applied", id=str(memory.id), version=memory.version)
    changes, conflicts = merge(memory, base_version, fields)
    if conflicts:
        return _result("conflict", id=str(memory.id), conflicts=conflicts, server=memory_payload(memory))
    if changes:
        memory = memory_update(memory=memory, actor=actor, changes=changes, change="synced")
    return _result("merged", id=str(memory.id), version=memory.version, merged=sorted(changes))


def _delete(memory: Memory, actor: Principal, change: dict[str, Any]) -> dict[str, Any]:
    if change["base_version"] != memory.version:
        return _result("conflict", id=str(memory.id), conflicts=["deleted"], server=memory_payload(memory))
    memory_id = str(memory.id)  # Model.delete() clears the pk
    memory_delete(memory=memory, actor=actor)
    return _result("applied", id=memory_id)


def _refused(memory: Memory) -> dict[str, Any]:
    """Not this actor's to change: nothing applied; the server's copy undoes the device's edit."""
    return _result("forbidden", id=str(memory.id), server=memory_payload(memory))


def _with_refused(result: dict[str, Any], refused: list[str]) -> dict[str, Any]:
    """A change applied without the fields named in `refused` (pinning, deprecating: a
    steward's), with the server's copy: what is left may have changed nothing, and then no pull
    would bring the memory back. A conflict applied nothing, and says only that."""
    if not refused or result["status"] not in ("applied", "merged"):
        return result
    return {
        **result,
        "refused": refused,
        "server": memory_payload(memory_selectors.memory_by_id(result["id"])),
    }


def may_steward(actor: Principal, organization_id) -> bool:
    """Pin, deprecate (either way) or delete another's memory: `memories:review`, as in the API."""
    return actor.has(organization_id, Perm.MEMORIES_REVIEW)


def can_delete(actor: Principal, memory: Memory) -> bool:
    own = actor.user is not None and memory.owner_id == actor.user.pk
    return own or may_steward(actor, memory.organization_id)


def _current(memory: Memory | None) -> Memory | None:
    """The memory as the changes before this one left it, locked; None once one deleted it.
    What the caller resolved was read before any change applied."""
    if memory is None:
        return None
    try:
        return memory_locked(memory)
    except Memory.DoesNotExist:
        return None


@transaction.atomic
def push_apply(
    *, project: Project, actor: Principal, changes: list[dict[str, Any]], memories: dict
) -> list[dict]:
    """Apply validated changes in order, in one transaction, each seeing what the ones before it
    did. A change the services refuse as invalid (a scope the project cannot have, a payload that
    does not fit the type, a relation to nothing) is undone alone and comes back `invalid`: one
    bad change must not keep a device's other work from applying. `memories` maps the ids the changes name to the memories the caller may touch (resolved
    by the API layer, before any change applied: each is read again as it is reached).

    The rows a push touches are locked first, all at once and in id order: two pushes naming
    the same memories in different orders would otherwise each lock one and wait for the other's.
    That includes the memories its creates relate to (a relation's foreign key check waits for a
    locked target), and before them the refs its creates name, in order too: a second push of a
    new ref waits for the first to commit, then finds its memory."""
    for name in sorted(
        {_ref_lock(_ref_owner(project, actor, c["ref"])) for c in changes if c["op"] == "create"}
    ):
        hold_until_commit(name)
    named = {m.pk for m in memories.values()} | {
        relation.target_memory_id
        for change in changes
        if change["op"] == "create"
        for relation in change["memory"].relations
        if relation.target_memory_id is not None
    }
    memory_selectors.memories_lock(organization_id=project.organization_id, ids=named)
    results = []
    # A device does not know the versions its own edits will get, so a later change in the same
    # push to a memory it already changed may carry the version it saw before (edit, then forget):
    # that base counts as the version its earlier change produced. memory id → (the device's base,
    # the version after this push's changes).
    own: dict[str, tuple[int, int]] = {}
    for change in changes:
        try:
            with transaction.atomic():  # (a savepoint: a change that turns out invalid undoes itself)
                results.append(_apply(project, actor, change, memories, own))
        except (Invalid, Conflict, NotFound) as exc:  # (this change alone: the rest apply)
            names = {"ref": change["ref"]} if change["op"] == "create" else {"id": change["id"]}
            results.append(invalid_result(names, exc.message, details=exc.details))
    device_seen(actor)
    return results


def _apply(
    project: Project,
    actor: Principal,
    change: dict[str, Any],
    memories: dict,
    own: dict[str, tuple[int, int]],
) -> dict[str, Any]:
    """One change of a push (push_apply's loop body). Records in `own` the version an edit that
    applied as sent produced."""
    op = change["op"]
    if op == "create":
        refused = []
        if change["memory"].pinned and not may_steward(actor, project.organization_id):
            change = {**change, "memory": change["memory"].model_copy(update={"pinned": False})}
            refused = ["pinned"]
        return _with_refused(_create(project, actor, change), refused)
    memory = _current(memories.get(change["id"]))
    seen, produced = own.get(change["id"], (None, None))
    if memory is not None and change["base_version"] == seen and memory.version == produced:
        change = {**change, "base_version": memory.version}
    if memory is None:
        return _result("gone" if op == "delete" else "not_found", id=change["id"])
    if op == "delete":
        return _delete(memory, actor, change) if can_delete(actor, memory) else _refused(memory)
    # What only a steward may change is left out of the edit; the rest applies.
    refused = [] if may_steward(actor, memory.organization_id) else steward_fields(change["fields"], memory)
    fields = {k: v for k, v in change["fields"].items() if k not in refused}
    if not fields:
        return _refused(memory)
    result = _update(memory, actor, {**change, "fields": fields})
    if result["status"] == "applied":  # (a merge took in changes the device never saw)
        own[change["id"]] = (seen if seen is not None else change["base_version"], result["version"])
    return _with_refused(result, refused)


def device_seen(actor: Principal) -> None:
    if actor.api_key is not None:
        Device.objects.filter(api_key=actor.api_key).update(last_sync_at=timezone.now())
