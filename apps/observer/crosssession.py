"""Cross-session synthesis: what no single session shows, from the frequency tables.

- Threshold mode: when a module reaches 5, 10, 20, 50 or 100 sessions, one pass over its
  frequency tables writes at most 5 memories (prefetch pattern, strongest coupling, recurring
  errors, what the module is for) — with one LLM call when configured, from templates otherwise.
- Weekly mode: module pairs with strongly co-accessed files that no causal_dependency memory
  covers yet.
Each run is logged in `SynthesisLog`; a (module, threshold) pair never runs twice.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from apps.memories.selectors import memories_of_project
from apps.observer import promotion, synthesis, text_rules
from apps.observer.models import ModuleStat, SynthesisLog
from apps.tenants.models import Project
from apps.tenants.principal import SYSTEM

logger = logging.getLogger(__name__)

MAX_MEMORIES = 5
WEEKLY_MIN_EDGE_SESSIONS = 5
WEEKLY_MIN_EDGES = 3
LLM_TYPES = {"prefetch_pattern", "causal_dependency", "gotcha", "error_pattern", "module_insight"}


def module_summary(project_id, module: str) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT kind, key, session_count, total, total2, directional, data, promoted_memory_id
            FROM observer_patternstat
            WHERE project_id = %s AND module = %s AND kind IN ('file_access', 'co_access', 'error_retry')
            ORDER BY session_count DESC, key LIMIT 300
            """,
            [str(project_id), module],
        )
        rows = [(*row[:6], promotion._json(row[6]), row[7]) for row in cursor.fetchall()]
    files = [
        {"path": key, "sessions": n, "edit_sessions": int(t2)}
        for kind, key, n, _t, t2, _d, _x, _p in rows
        if kind == "file_access" and n >= 2  # a file seen once is not where the module's work is
    ][:10]
    pairs = [
        {"files": key.split("\t"), "sessions": n, "promoted": p is not None}
        for kind, key, n, _t, _t2, _d, _x, p in rows
        if kind == "co_access" and n >= 2
    ][:10]
    errors = [
        {"message": (data or {}).get("message", ""), "tool": (data or {}).get("tool", ""), "sessions": n,
         "resolved_by": (data or {}).get("resolved_by", ""), "promoted": p is not None}
        for kind, key, n, _t, _t2, _d, data, p in rows if kind == "error_retry" and n >= 2
    ][:10]  # fmt: skip
    return {"files": files, "pairs": pairs, "errors": errors}


def _llm_candidates(
    module: str, count: int, summary: dict[str, Any]
) -> tuple[list[promotion.Candidate], bool]:
    if not settings.OPENAI_API_KEY:
        return [], False
    prompt = (
        f'You are analyzing {count} agent sessions on the "{module}" module.\n\n'
        "File access patterns:\n" + "\n".join(f"- {f['path']}: {f['sessions']} sessions" for f in summary["files"])
        + "\n\nCo-accessed pairs:\n" + "\n".join(f"- {' + '.join(p['files'])}: {p['sessions']} sessions" for p in summary["pairs"])
        + "\n\nRecurring errors:\n" + "\n".join(f"- \"{e['message']}\": {e['sessions']} sessions, resolved: {e['resolved_by']}" for e in summary["errors"])
        + "\n\nIdentify (max 5 memories, omit obvious things): files to prefetch (prefetch_pattern), non-obvious "
        "file coupling (causal_dependency or gotcha), recurring errors (error_pattern), non-obvious module purpose "
        '(module_insight). Answer JSON: {"memories": [{"type": "...", "content": "...", "related_files": [...], '
        '"confidence": 0.0-1.0}]}'
    )  # fmt: skip
    try:
        from memorysaas.kernel.llm import chat_client

        client = chat_client(timeout=20.0)
        response = client.chat.completions.create(
            model=settings.OPENAI_CHAT_MODEL,
            messages=[{"role": "user", "content": prompt}],
            response_format={"type": "json_object"},
            max_tokens=400,
            temperature=0,
        )
        items = json.loads(response.choices[0].message.content or "{}").get("memories", [])
    except Exception:
        logger.warning("Module synthesis call failed; using templates", exc_info=True)
        return [], True
    candidates = (
        [_llm_candidate(module, item) for item in items[:MAX_MEMORIES]] if isinstance(items, list) else []
    )
    return [c for c in candidates if c is not None], True


def _llm_candidate(module: str, item: Any) -> promotion.Candidate | None:
    """One item of the model's answer as a candidate; None when it is malformed (the others stay)."""
    if not isinstance(item, dict):
        return None
    memory_type, content, files = item.get("type"), item.get("content"), item.get("related_files")
    if not isinstance(memory_type, str) or memory_type not in LLM_TYPES:
        return None
    if not isinstance(content, str) or not content.strip():
        return None
    if files is None:
        files = []
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    raw = item.get("confidence")
    if isinstance(raw, bool):
        return None  # (a bool is an int to float())
    try:
        confidence = float(0.6 if raw is None else raw)
    except (TypeError, ValueError, OverflowError):
        return None  # e.g. "high", or an integer of 400 digits
    if not math.isfinite(confidence):
        return None
    return promotion.Candidate(
        kind="module_synthesis",
        ident=promotion.T_ident("synthesis", f"{module}|{memory_type}|{content}"),
        memory_type=memory_type,
        data={},
        confidence=round(min(0.9, max(0.3, confidence)), 3),
        files=files[:20],
        modules=[module],
        content=content[:2000],
    )


def _template_candidates(
    project_id, module: str, count: int, summary: dict[str, Any]
) -> list[promotion.Candidate]:
    out = promotion.prefetch_candidates(project_id=project_id, modules={module: count}, minimum=3)
    for pair in summary["pairs"]:
        if not pair["promoted"] and pair["sessions"] >= 3:
            a, b = pair["files"]
            data = {"directional_share": 0, "first": a, "task_types": []}
            out.append(
                promotion.Candidate(
                    kind="co_access",
                    ident=promotion.T_ident("co_access_synth", f"{a}\t{b}"),
                    memory_type="causal_dependency",
                    data=data,
                    confidence=0.7,
                    files=[a, b],
                    modules=[module],
                    payload={"trigger_file": a, "dependent_files": [b]},
                    content=synthesis.template("co_access", data, sessions=pair["sessions"], files=[a, b]),
                )  # fmt: skip
            )
            break
    if summary["files"]:
        top = ", ".join(f"`{f['path']}`" for f in summary["files"][:3])
        edited = [f["path"] for f in summary["files"] if f["edit_sessions"]][:3]
        changed = f" Most often changed: {', '.join(f'`{p}`' for p in edited)}." if edited else ""
        content = f"`{module}` ({count} agent sessions so far): work here centres on {top}.{changed}"
        out.append(
            promotion.Candidate(
                kind="module_synthesis",
                ident=promotion.T_ident("module_insight", f"{module}|{count}"),
                memory_type="module_insight",
                data={},
                confidence=0.6,
                files=[f["path"] for f in summary["files"][:5]],
                modules=[module],
                content=content,
            )  # fmt: skip
        )
    return out[:MAX_MEMORIES]


def module_synthesis(*, project_id, module: str, session_count: int) -> dict[str, int]:
    project = Project.objects.filter(id=project_id).first()
    if project is None:
        return {"created": 0, "reinforced": 0}
    with transaction.atomic():
        try:
            with transaction.atomic():
                log = SynthesisLog.objects.create(project=project, module=module, trigger=str(session_count))
        except IntegrityError:
            return {"created": 0, "reinforced": 0}  # this threshold already ran
        summary = module_summary(project.id, module)
        candidates, used_llm = _llm_candidates(module, session_count, summary)
        if not candidates:
            candidates = _template_candidates(project.id, module, session_count, summary)
        result = promotion.Result(llm_calls=int(used_llm))
        for c in candidates:
            c.trust.extend(text_rules.suspicious(c.content))
            if c.trust:
                c.tags.append("obs:tainted")
                c.confidence = round(c.confidence * promotion.TAINT_FACTOR, 4)
        promotion.store(project=project, actor=SYSTEM, candidates=candidates, cap=MAX_MEMORIES, result=result)
        log.used_llm = used_llm
        log.memories_created = len(result.created)
        log.memories_reinforced = len(result.reinforced)
        log.detail = {"summary": summary, "created": [str(i) for i in result.created]}
        log.save()
    return {"created": len(result.created), "reinforced": len(result.reinforced)}


def cross_module(project: Project) -> dict[str, int]:
    """Weekly: module pairs whose files are co-accessed in 5+ sessions, on 3+ edges, with no
    causal_dependency memory naming both modules yet."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT split_part(key, E'\\t', 1), split_part(key, E'\\t', 2), session_count
            FROM observer_patternstat
            WHERE project_id = %s AND kind = 'co_access' AND session_count >= %s
            """,
            [str(project.id), WEEKLY_MIN_EDGE_SESSIONS],
        )
        edges = cursor.fetchall()
    pairs: dict[tuple[str, str], list[tuple[str, str, int]]] = {}
    for a, b, n in edges:
        ma, mb = text_rules.module_of(a), text_rules.module_of(b)
        if ma != mb:
            pairs.setdefault(tuple(sorted((ma, mb))), []).append((a, b, n))
    week = timezone.now().strftime("weekly-%G-%V")
    created = 0
    for (ma, mb), found in pairs.items():
        if len(found) < WEEKLY_MIN_EDGES:
            continue
        if (
            memories_of_project(project=project)
            .filter(type="causal_dependency", deprecated=False, related_modules__contains=[ma, mb])
            .exists()
        ):
            continue
        with transaction.atomic():
            try:
                with transaction.atomic():
                    log = SynthesisLog.objects.create(project=project, module=f"{ma}|{mb}", trigger=week)
            except IntegrityError:
                continue
            found.sort(key=lambda e: -e[2])
            files = list(dict.fromkeys(p for a, b, _ in found[:5] for p in (a, b)))
            content = (
                f"`{ma}` and `{mb}` are coupled: agents use their files together in {found[0][2]}+ sessions "
                f"({', '.join(f'`{f}`' for f in files[:4])}). A change in one usually needs the other."
            )
            candidate = promotion.Candidate(
                kind="cross_module", ident=promotion.T_ident("cross_module", f"{ma}|{mb}"),
                memory_type="causal_dependency", data={}, confidence=0.7, files=files, modules=[ma, mb],
                payload={"trigger_file": files[0], "dependent_files": files[1:] or files[:1]}, content=content,
            )  # fmt: skip
            result = promotion.Result()
            promotion.store(project=project, actor=SYSTEM, candidates=[candidate], cap=1, result=result)
            log.memories_created = len(result.created)
            log.save(update_fields=["memories_created"])
            created += len(result.created)
    return {"pairs": len(pairs), "created": created}


def cross_module_all() -> dict[str, int]:
    total = {"projects": 0, "created": 0}
    for project_id in ModuleStat.objects.values_list("project_id", flat=True).distinct():
        project = Project.objects.get(id=project_id)
        total["projects"] += 1
        total["created"] += cross_module(project)["created"]
    return total
