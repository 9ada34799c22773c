"""Pattern detection: the observer's 17 signal classes, each found by its own detector in a
finished session's scratchpad (not Django signals).

`derive(pad, ...)` turns one session's scratchpad into `Signal`s: each has a class (`kind`), a
`key` that identifies the same pattern in another session (a path, a pair of paths, an error
fingerprint, a normalised query, a 4-step tool sequence), the step it arose at (for the trust
gate) and the data its memory will be written from. Whether a signal becomes a memory is the
promotion pipeline's decision (minimum sessions, gate, novelty, trust), not this module's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from apps.observer import text_rules
from apps.observer.scratchpad import FILE_TOOLS, Scratchpad


@dataclass(frozen=True)
class SignalClass:
    priority: float
    min_sessions: int
    promotes_to: str


# Per class: its priority (where its memory's confidence starts), the sessions it must be seen in
# before it is promoted, and the memory type it becomes.
CLASSES: dict[str, SignalClass] = {
    "self_correction": SignalClass(0.88, 1, "gotcha"),
    "co_access": SignalClass(0.91, 3, "causal_dependency"),
    "error_retry": SignalClass(0.85, 2, "error_pattern"),
    "parallel_conflict": SignalClass(0.82, 1, "gotcha"),
    "external_reference": SignalClass(0.61, 3, "module_insight"),
    "read_abandon": SignalClass(0.79, 3, "gotcha"),
    "repeated_grep": SignalClass(0.76, 2, "module_insight"),
    "test_order": SignalClass(0.74, 3, "task_calibration"),
    "sequence": SignalClass(0.73, 3, "workflow_recipe"),
    "file_access": SignalClass(0.72, 3, "prefetch_pattern"),
    "step_overrun": SignalClass(0.71, 3, "task_calibration"),
    "import_chase": SignalClass(0.52, 4, "causal_dependency"),
    "config_touch": SignalClass(0.66, 2, "causal_dependency"),
    "glob_ignore": SignalClass(0.64, 2, "gotcha"),
    "context_token_spike": SignalClass(0.63, 3, "context_cost"),
    "backtrack": SignalClass(0.68, 2, "gotcha"),
    "time_anomaly": SignalClass(0.48, 3, "gotcha"),
}
SIGNAL_FLOOR = 0.4  # signals valued below this are dropped before promotion
SEQUENCE_LENGTH = 4
OVERRUN_RATIO = 1.5
TOKENS_PER_FILE_SPIKE = 20_000
PEAK_TOKENS_SPIKE = 120_000
MAX_PAIR_SIGNALS = 100
EDIT_TOOLS = frozenset(tool for tool, access in FILE_TOOLS.items() if access == "edit")


@dataclass
class Signal:
    kind: str
    key: str
    step: int = 0
    module: str = ""
    files: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    # Sums the cross-session tables keep for this key (see PatternStat).
    total: float = 0.0
    total2: float = 0.0
    directional: int = 0
    # Only counted in the cross-session tables, never a memory by itself.
    stat_only: bool = False

    @property
    def cls(self) -> SignalClass:
        return CLASSES[self.kind]

    @property
    def ident(self) -> str:
        """A stable short id of (kind, key): the tag that ties a memory to its pattern."""
        return hashlib.blake2b(f"{self.kind}|{self.key}".encode(), digest_size=6).hexdigest()


def _short(text: str, n: int = 12) -> str:
    return hashlib.blake2b(text_rules.normalize_pattern(text).encode(), digest_size=n // 2).hexdigest()


@dataclass(frozen=True)
class _Finished:
    """What the detectors read of one finished session."""

    pad: Scratchpad
    outcome: str
    steps: int | None
    edited: set[str]
    edited_modules: set[str]


def derive(pad: Scratchpad, *, outcome: str = "", steps: int | None = None) -> list[Signal]:
    """Every detector's signals for the session, in the order of DETECTORS."""
    edited = set(pad.edited())
    finished = _Finished(pad, outcome, steps, edited, {text_rules.module_of(p) for p in edited})
    return [signal for detector in DETECTORS for signal in detector(finished)]


def _file_access(finished: _Finished) -> list[Signal]:
    """File access: every file touched (feeds file-node stats and prefetch plans)."""
    files = finished.pad.files
    signals: list[Signal] = []
    for path, (reads, edits, first, _last, _e, _n) in files.items():
        signals.append(
            Signal("file_access", path, first, text_rules.module_of(path), [path], {"edited": bool(edits)},
                   total=reads + edits, total2=1 if edits else 0, stat_only=True)
        )  # fmt: skip
    return signals


def _co_access(finished: _Finished) -> list[Signal]:
    """Co-access within a 5-file window, with direction; pairs with an edited file first."""
    pad, edited = finished.pad, finished.edited
    signals: list[Signal] = []

    def touches_edit(key: str) -> bool:
        a, _, b = key.partition("\t")
        return a in edited or b in edited

    pairs = sorted(pad.pairs.items(), key=lambda item: (not touches_edit(item[0]), item[1][0]))
    for key, (delta, a_first) in pairs[:MAX_PAIR_SIGNALS]:
        if edited and not touches_edit(key):
            continue
        paths = key.split("\t")
        if len(paths) != 2:
            continue  # (a checkpoint from before paths lost their control characters)
        a, b = paths
        signals.append(
            Signal("co_access", key, 0, text_rules.module_of(a), [a, b], {"step_delta": delta},
                   total=1, total2=delta, directional=a_first)
        )  # fmt: skip
    return signals


def _error_retry(finished: _Finished) -> list[Signal]:
    """Error-retry, fingerprinted, with how it was resolved."""
    pad, files = finished.pad, finished.pad.files
    signals: list[Signal] = []
    for fp, (count, tool, message, step, resolved_by, to_resolve) in pad.errors.items():
        near = [p for p, e in files.items() if abs(e[3] - step) <= 3][:3]
        signals.append(
            Signal("error_retry", fp, step, text_rules.module_of(near[0]) if near else "", near,
                   {"tool": tool, "message": message, "resolved_by": resolved_by, "steps_to_resolve": to_resolve},
                   total=count)
        )  # fmt: skip
    return signals


def _backtrack(finished: _Finished) -> list[Signal]:
    """Backtrack: a file edited again within a few steps after other work."""
    pad = finished.pad
    signals: list[Signal] = []
    for path, between, seen in pad.backtracks:
        signals.append(
            Signal(
                "backtrack",
                path,
                0,
                text_rules.module_of(path),
                [path],
                {"steps_between": between, "files_seen": seen},
            )
        )
    return signals


def _read_abandon(finished: _Finished) -> list[Signal]:
    """Read-then-abandon: a file read at least twice and never edited, while the session edited
    elsewhere in its module."""
    pad, files, edited, edited_modules = (
        finished.pad,
        finished.pad.files,
        finished.edited,
        finished.edited_modules,
    )
    signals: list[Signal] = []
    for path in pad.read_only():
        entry = files[path]
        if entry[0] < 2:
            continue
        module = text_rules.module_of(path)
        went_to = (
            entry[5]
            if entry[5] in edited
            else next((p for p in edited if text_rules.module_of(p) == module), None)
        )
        if (
            went_to
            and module in edited_modules
            and not text_rules.is_test_file(path)
            and not text_rules.config_kind(path)
        ):
            signals.append(
                Signal("read_abandon", path, entry[2], module, [path, went_to], {"went_to": went_to})
            )
    return signals


def _repeated_grep(finished: _Finished) -> list[Signal]:
    """Repeated grep."""
    pad, files = finished.pad, finished.pad.files
    signals: list[Signal] = []
    for pattern, (count, empty, first) in pad.greps.items():
        if count >= 2:
            near = [p for p, e in files.items() if e[2] >= first][:3]
            signals.append(
                Signal("repeated_grep", pattern, first, text_rules.module_of(near[0]) if near else "", near,
                       {"pattern": pattern, "repeats": count, "empty_results": empty, "found": near[:1]})
            )  # fmt: skip
    return signals


def _sequence(finished: _Finished) -> list[Signal]:
    """Tool sequences: the session's 4-step windows (successful sessions only)."""
    pad, outcome = finished.pad, finished.outcome
    signals: list[Signal] = []
    if outcome == "success":
        seq = pad.sequence
        seen: set[str] = set()
        for i in range(len(seq) - SEQUENCE_LENGTH + 1):
            window = seq[i : i + SEQUENCE_LENGTH]
            if len(set(window)) < 3 or not any(step.partition(":")[0] in EDIT_TOOLS for step in window):
                continue  # a recipe changes something; read-only loops are not workflows
            key = " > ".join(window)
            if key not in seen:
                seen.add(key)
                signals.append(Signal("sequence", key, 0, "", [], {"steps": window}, total=1))
    return signals


def _time_anomaly(finished: _Finished) -> list[Signal]:
    """Time anomaly: a long dwell, kept only when the same file also saw an error or a backtrack."""
    pad, files = finished.pad, finished.pad.files
    signals: list[Signal] = []
    troubled = {b[0] for b in pad.backtracks} | {
        p for p, e in files.items() for er in pad.errors.values() if abs(e[3] - er[3]) <= 3
    }
    for path, seconds, step in pad.anomalies:
        if path in troubled:
            signals.append(
                Signal("time_anomaly", path, step, text_rules.module_of(path), [path], {"seconds": seconds})
            )
    return signals


def _self_correction(finished: _Finished) -> list[Signal]:
    """Self-correction."""
    pad = finished.pad
    signals: list[Signal] = []
    for step, kind, sentence, path in pad.corrections:
        signals.append(
            Signal("self_correction", _short(sentence), step, text_rules.module_of(path) if path else "",
                   [path] if path else [], {"sentence": sentence, "correction_type": kind})
        )  # fmt: skip
    return signals


def _external_reference(finished: _Finished) -> list[Signal]:
    """External reference."""
    pad = finished.pad
    signals: list[Signal] = []
    for step, tool, query, edit_after in pad.external:
        if query:
            signals.append(
                Signal("external_reference", query, step, text_rules.module_of(edit_after) if edit_after else "",
                       [edit_after] if edit_after else [], {"tool": tool, "query": query, "edited": edit_after})
            )  # fmt: skip
    return signals


def _glob_ignore(finished: _Finished) -> list[Signal]:
    """Glob then ignore."""
    pad = finished.pad
    signals: list[Signal] = []
    for pattern, (returned, read, step) in pad.globs.items():
        if returned >= 3 and read / returned < 0.1:
            signals.append(
                Signal(
                    "glob_ignore",
                    pattern,
                    step,
                    "",
                    [],
                    {"pattern": pattern, "returned": returned, "read": read},
                )
            )
    return signals


def _import_chase(finished: _Finished) -> list[Signal]:
    """Import chase."""
    pad = finished.pad
    signals: list[Signal] = []
    for parent, child, steps_between in pad.chases:
        signals.append(
            Signal(
                "import_chase",
                f"{parent}\t{child}",
                0,
                text_rules.module_of(parent),
                [parent, child],
                {"steps": steps_between},
            )
        )
    return signals


def _test_order(finished: _Finished) -> list[Signal]:
    """Test order."""
    pad = finished.pad
    signals: list[Signal] = []
    if pad.impl_files and (pad.test_files or pad.test_read_step is not None or pad.test_run_step is not None):
        module = text_rules.module_of(pad.impl_files[0])
        first_test = min((s for s in (pad.test_read_step, pad.test_run_step) if s is not None), default=None)
        test_first = (
            first_test is not None and pad.impl_edit_step is not None and first_test < pad.impl_edit_step
        )
        signals.append(
            Signal("test_order", module, 0, module, pad.test_files[:3] + pad.impl_files[:3],
                   {"test_first": test_first}, total=1 if test_first else 0)
        )  # fmt: skip
    return signals


def _config_touch(finished: _Finished) -> list[Signal]:
    """Config touch: a config file edited together with other files, keyed by the module of the edit nearest to it (the change it was part of)."""
    pad, files, edited = finished.pad, finished.pad.files, finished.edited
    signals: list[Signal] = []
    others = [p for p in edited if p not in pad.configs_edited]
    for config in pad.configs_edited:
        if others and config in files:
            at = files[config][4]
            nearest = min(others, key=lambda p: abs(files[p][4] - at))
            module = text_rules.module_of(nearest)
            with_ = [nearest, *(p for p in others if p != nearest)][:5]
            signals.append(
                Signal("config_touch", f"{config}\t{module}", 0, module, [config, *with_],
                       {"config": config, "config_kind": text_rules.config_kind(config), "edited_with": with_})
            )  # fmt: skip
    return signals


def _step_overrun(finished: _Finished) -> list[Signal]:
    """Step overrun (planned vs actual; every planned session feeds calibration)."""
    pad, steps = finished.pad, finished.steps
    signals: list[Signal] = []
    actual = steps or pad.step
    if pad.planned_steps and actual:
        modules = pad.modules()
        module = modules[0] if modules else "."
        ratio = actual / pad.planned_steps
        signals.append(
            Signal("step_overrun", module, 0, module, [], {"planned": pad.planned_steps, "actual": actual,
                   "ratio": round(ratio, 2), "overrun": ratio >= OVERRUN_RATIO}, total=actual, total2=pad.planned_steps)
        )  # fmt: skip
    return signals


def _context_token_spike(finished: _Finished) -> list[Signal]:
    """Context-token spike (16, parallel conflict, needs other sessions: see promotion)."""
    pad, files = finished.pad, finished.pad.files
    signals: list[Signal] = []
    tokens_in, _out, peak, _n = pad.tokens
    files_read = sum(1 for e in files.values() if e[0]) or 1
    if tokens_in:
        modules = pad.modules()
        module = modules[0] if modules else "."
        per_file = tokens_in / files_read
        spike = per_file >= TOKENS_PER_FILE_SPIKE or peak >= PEAK_TOKENS_SPIKE
        signals.append(
            Signal("context_token_spike", module, 0, module, [], {"tokens": tokens_in, "files_read": files_read,
                   "tokens_per_file": round(per_file), "peak": peak, "spike": spike},
                   total=tokens_in, total2=1 if spike else 0)
        )  # fmt: skip
    return signals


# One detector per signal class, in the order their signals are listed (the parallel conflict
# needs other sessions: parallel_conflicts).
DETECTORS: tuple[Callable[[_Finished], list[Signal]], ...] = (
    _file_access,
    _co_access,
    _error_retry,
    _backtrack,
    _read_abandon,
    _repeated_grep,
    _sequence,
    _time_anomaly,
    _self_correction,
    _external_reference,
    _glob_ignore,
    _import_chase,
    _test_order,
    _config_touch,
    _step_overrun,
    _context_token_spike,
)


def parallel_conflicts(pad: Scratchpad, sibling_edits: dict[str, list[str]]) -> list[Signal]:
    """16: files this session edited that a parallel session of the same work unit edited too."""
    mine = set(pad.edited())
    found: dict[str, list[str]] = {}
    for session_id, files in sibling_edits.items():
        for path in mine.intersection(files):
            found.setdefault(path, []).append(session_id)
    return [
        Signal("parallel_conflict", path, 0, text_rules.module_of(path), [path], {"sessions": sessions})
        for path, sessions in sorted(found.items())
    ]
