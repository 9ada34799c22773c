"""The scratchpad: what one session has done so far, updated in O(1) per event.

`Scratchpad.observe(event)` is the whole ingest-time analysis: counters, first/last access, the
edit set, grep and glob bookkeeping, error fingerprints with how they were resolved, the recent
tool ring, intra-session co-access within a 5-file window (with direction), config touches,
self-corrections, dead-end language, external references (the taint point), import chasing,
test ordering, backtracks, dwell-time anomalies, tokens, explicit notes, commits and the calls of
browser and app-driving tools (e2e.py). Every collection is capped, so a runaway session cannot
grow it without bound. No LLM, no embedding, no database.

The state is plain JSON (`to_dict` / `from_dict`) so it is checkpointed in the session row and
rebuilt after a restart by replaying the events logged since the checkpoint.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from apps.observer import e2e, text_rules

FILE_TOOLS = {"Read": "read", "Edit": "edit", "Write": "edit", "MultiEdit": "edit", "NotebookEdit": "edit"}
EXTERNAL_TOOLS = {"WebFetch", "WebSearch"}
SEARCH_TOOLS = {"Grep", "Glob"}
COACCESS_WINDOW = 5
RING = 8
MAX_FILES = 2000
MAX_PAIRS = 5000
MAX_LIST = 50
MAX_NOTES = 100
MAX_SEQUENCE = 80
BACKTRACK_WITHIN = 10
CHASE_WITHIN = 3
# Early triggers: staged at once, served ahead of the rest at finalize.
EARLY_GREP_REPEATS = 3

_IMPORT_LINE = re.compile(
    r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+)|.*?require\(['\"]([^'\"]+)['\"]\)"
    r"|.*?\bfrom\s+['\"]([^'\"]+)['\"])",
    re.MULTILINE,
)


# The arguments in which a tool call names a file.
PATH_ARGS = ("file_path", "path", "notebook_path", "file")
GLOB_ARGS = ("pattern", "glob")  # a Glob's pattern


def _path_arg(args: dict[str, Any]) -> str:
    for key in PATH_ARGS:
        value = args.get(key)
        if isinstance(value, str) and value:
            path = text_rules.printable_path(value).replace("\\", "/")
            while path.startswith("./"):
                path = path[2:]
            return path[:500]
    return ""


def _stem(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    stem = name.split(".", 1)[0]
    return (
        stem if stem not in {"index", "__init__", "mod"} else path.rsplit("/", 2)[-2] if "/" in path else stem
    )


def tool_key(tool: str, args: dict[str, Any]) -> str:
    """A tool call with its arguments normalised (for the tool-sequence signal): paths become modules,
    commands what they run (`text.command_key`), patterns are dropped."""
    path = _path_arg(args)
    if path:
        return f"{tool}:{text_rules.module_of(path)}"
    if tool == "Bash":
        return f"Bash:{text_rules.command_key(str(args.get('command', '')))}"[:60]
    return tool


class Scratchpad:
    """One session's working state. Attributes are JSON-ready containers."""

    def __init__(self, session_type: str = "build") -> None:
        self.session_type = session_type
        self.seen_upto = 0  # every seq <= this has been accepted
        self.seen_extra: set[int] = set()
        self.events = 0
        self.step = 0
        self.tool_calls = 0
        # path -> [reads, edits, first_step, last_step, last_edit_step, file opened after the latest access]
        self.files: dict[str, list] = {}
        self.recent: list[list] = []  # [[path, step], ...] last COACCESS_WINDOW files
        self.pairs: dict[str, list] = {}  # "a\tb" (sorted) -> [step_delta, a_first]
        self.greps: dict[str, list] = {}  # pattern -> [count, empty_results, first_step]
        self.globs: dict[str, list] = {}  # pattern -> [returned, read, step]
        self.glob_files: dict[str, str] = {}
        self.pending: dict[str, list] = {}  # tool -> [key, step, detail]
        self.errors: dict[str, list] = {}  # fp -> [count, tool, message, first_step, resolved_by, steps]
        self.open_error: list | None = None  # [fp, tool, step]
        self.ring: list[str] = []
        self.sequence: list[str] = []
        self.gap = [0, 0.0, 0.0]  # Welford: n, mean, m2 of seconds between tool calls
        self.last_ts: float | None = None
        self.last_read: list | None = None  # [path, ts]
        self.anomalies: list[list] = []  # [path, seconds, step]
        self.corrections: list[list] = []  # [step, kind, sentence, file]
        self.dead_ends: list[list] = []  # [step, sentence, file]
        self.external: list[list] = []  # [step, tool, query, edit_after]
        self.last_external_step: int | None = None
        self.chases: list[list] = []  # [parent, child, steps]
        self.last_imports: list | None = None  # [path, step, [names]]
        self.test_read_step: int | None = None
        self.test_run_step: int | None = None
        self.impl_edit_step: int | None = None
        self.test_files: list[str] = []
        self.impl_files: list[str] = []
        self.configs_edited: list[str] = []
        self.configs_read: list[str] = []
        self.backtracks: list[list] = []  # [path, steps_between, files_seen]
        self.last_edit: list | None = None  # [path, step, files_seen_since]
        self.tokens = [0, 0, 0, 0]  # input, output, peak input, steps with usage
        self.planned_steps: int | None = None
        self.notes: list[dict[str, Any]] = []
        self.commits: list[dict[str, Any]] = []
        self.validations: list[dict[str, Any]] = []
        self.e2e: list[list] = []  # [step, tool, target, is_error, result] of browser/app-driving calls
        self.e2e_call: list | None = None  # [step, tool, target] of the one awaiting its result
        self.phases: list[str] = []
        self.early: list[str] = []  # early-trigger signal kinds, in the order they fired
        self.promoted_keys: set[str] = set()
        self.injected: list[str] = []
        self.notes_injected = 0

    # ------------------------------------------------------------ idempotency

    def accept(self, seq: int) -> bool:
        """True the first time `seq` is seen (and remembers it); False for a repeat."""
        if seq <= self.seen_upto or seq in self.seen_extra:
            return False
        if seq == self.seen_upto + 1:
            self.seen_upto = seq
            while self.seen_upto + 1 in self.seen_extra:
                self.seen_upto += 1
                self.seen_extra.discard(self.seen_upto)
        else:
            self.seen_extra.add(seq)
        return True

    # ------------------------------------------------------------ ingest

    def observe(self, event: dict[str, Any]) -> None:
        self.events += 1
        step = event.get("step")
        if step is not None and step > self.step:
            self.step = step
        kind = event["type"]
        if kind == "tool_call":
            self._tool_call(event)
        elif kind == "tool_result":
            self._tool_result(event)
        elif kind == "reasoning":
            self._reasoning(event)
        elif kind == "step_complete":
            self._step_complete(event)
        elif kind == "record_memory":
            self._note(event.get("memory") or {}, event)
        elif kind == "plan":
            self.planned_steps = event.get("planned_steps")
        elif kind == "commit":
            if len(self.commits) < MAX_LIST:
                self.commits.append({"sha": event.get("sha", ""), "files": (event.get("files") or [])[:100]})
        elif kind == "phase" and event.get("phase") and len(self.phases) < MAX_LIST:
            self.phases.append(event["phase"])

    def _clock(self, event: dict[str, Any]) -> float | None:
        ts = event.get("ts")
        if ts is None:
            return None
        if isinstance(ts, datetime):
            return ts.timestamp()
        try:
            return datetime.fromisoformat(str(ts).replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None

    def _tool_call(self, event: dict[str, Any]) -> None:
        tool = event.get("tool") or "?"
        args = event.get("args") or {}
        step = event.get("step") or self.step
        self.tool_calls += 1
        now = self._clock(event)
        if now is not None:
            self._timing(now, step)
        key = tool_key(tool, args)
        self.ring.append(key)
        if len(self.ring) > RING:
            del self.ring[0]
        if (not self.sequence or self.sequence[-1] != key) and len(self.sequence) < MAX_SEQUENCE:
            self.sequence.append(key)
        path = _path_arg(args)
        access = FILE_TOOLS.get(tool)
        if e2e.is_e2e_tool(tool):
            self.e2e_call = [step, tool, e2e.target_of(args)]
        if path and access:
            self._file(path, access, step, now)
        elif tool == "Grep":
            pattern = text_rules.normalize_pattern(str(args.get("pattern", "")))
            if pattern:
                entry = self.greps.get(pattern)
                if entry is None:
                    if len(self.greps) < MAX_FILES:
                        self.greps[pattern] = [1, 0, step]
                else:
                    entry[0] += 1
                    if entry[0] == EARLY_GREP_REPEATS and "repeated_grep" not in self.early:
                        self.early.append("repeated_grep")
                self.pending["Grep"] = [pattern, step, ""]
        elif tool == "Glob":
            pattern = text_rules.normalize_pattern(str(next((args[k] for k in GLOB_ARGS if args.get(k)), "")))
            if pattern:
                self.pending["Glob"] = [pattern, step, ""]
        elif tool in EXTERNAL_TOOLS or tool.startswith("mcp__"):
            if tool in EXTERNAL_TOOLS or args.get("external"):
                query = str(args.get("query") or args.get("url") or args.get("prompt") or "")[:300]
                self.last_external_step = step
                if len(self.external) < MAX_LIST:
                    self.external.append([step, tool, text_rules.normalize_pattern(query), None])
        elif tool == "Bash":
            command = str(args.get("command", ""))
            if text_rules.TEST_RUN.search(command) and self.test_run_step is None:
                self.test_run_step = step
        if tool == "Bash":
            self.pending[tool] = [key, step, str(args.get("command", "")).strip()[:200]]
        elif tool not in SEARCH_TOOLS:
            self.pending[tool] = [key, step, path]

    def _timing(self, now: float, step: int) -> None:
        if self.last_ts is not None:
            delta = max(0.0, now - self.last_ts)
            n, mean, m2 = self.gap
            n += 1
            d = delta - mean
            mean += d / n
            m2 += d * (delta - mean)
            self.gap = [n, mean, m2]
            if self.last_read is not None and n >= 10 and len(self.anomalies) < MAX_LIST:
                sd = (m2 / (n - 1)) ** 0.5 if n > 1 else 0.0
                if delta > mean + 3 * sd and delta > 30:
                    self.anomalies.append([self.last_read[0], round(delta, 1), step])
        self.last_ts = now
        self.last_read = None

    def _file(self, path: str, access: str, step: int, now: float | None) -> None:
        entry = self.files.get(path)
        if entry is None:
            if len(self.files) >= MAX_FILES:
                return
            entry = self.files[path] = [0, 0, step, step, None, None]
            # import chase: a file the last read file imports, opened within a few steps
            chased = self.last_imports and step - self.last_imports[1] <= CHASE_WITHIN
            if chased and _stem(path) in self.last_imports[2] and len(self.chases) < MAX_LIST:
                self.chases.append([self.last_imports[0], path, step - self.last_imports[1]])
            # glob-then-read: count reads of a glob's results
            pattern = self.glob_files.get(path)
            if pattern and pattern in self.globs:
                self.globs[pattern][1] += 1
        entry[3] = step
        entry[5] = None  # where the agent went after its latest look at this file, read or edit
        for recent_path, recent_step in self.recent:
            if recent_path == path:
                continue
            first = self.files.get(recent_path)
            if first is not None and first[5] is None:
                first[5] = path
            pair = (recent_path, path) if recent_path < path else (path, recent_path)
            key = f"{pair[0]}\t{pair[1]}"
            if key not in self.pairs and len(self.pairs) < MAX_PAIRS:
                self.pairs[key] = [step - recent_step, 1 if pair[0] == recent_path else 0]
        self.recent = [r for r in self.recent if r[0] != path][-(COACCESS_WINDOW - 1) :] + [[path, step]]
        config = text_rules.config_kind(path)
        is_test = text_rules.is_test_file(path)
        if self.last_edit and self.last_edit[0] != path:
            self.last_edit[2] += 1
        if access == "read":
            entry[0] += 1
            if now is not None:
                self.last_read = [path, now]
            if config and path not in self.configs_read and len(self.configs_read) < MAX_LIST:
                self.configs_read.append(path)
            if is_test and self.test_read_step is None:
                self.test_read_step = step
        else:
            entry[1] += 1
            previous = entry[4]
            soon = previous is not None and step - previous <= BACKTRACK_WITHIN
            other_work = self.last_edit is not None and (self.last_edit[0] != path or self.last_edit[2] > 0)
            if soon and other_work and len(self.backtracks) < MAX_LIST:
                self.backtracks.append([path, step - previous, self.last_edit[2]])
            entry[4] = step
            self.last_edit = [path, step, 0]
            if config:
                if path not in self.configs_edited and len(self.configs_edited) < MAX_LIST:
                    self.configs_edited.append(path)
                    if len(self.edited()) >= 2 and "config_touch" not in self.early:
                        self.early.append("config_touch")
            elif is_test:
                if path not in self.test_files and len(self.test_files) < MAX_LIST:
                    self.test_files.append(path)
            else:
                if self.impl_edit_step is None:
                    self.impl_edit_step = step
                if path not in self.impl_files and len(self.impl_files) < MAX_LIST:
                    self.impl_files.append(path)
            if self.external and self.external[-1][3] is None:
                self.external[-1][3] = path

    def _tool_result(self, event: dict[str, Any]) -> None:
        tool = event.get("tool") or "?"
        step = event.get("step") or self.step
        result = event.get("result") or ""
        call = self.pending.pop(tool, None)
        if e2e.is_e2e_tool(tool):
            self._e2e_result(tool, step, result, bool(event.get("is_error")))
        if event.get("is_error"):
            fp, message = text_rules.error_fingerprint(tool, result or "error")
            entry = self.errors.get(fp)
            if entry is None:
                if len(self.errors) < MAX_LIST:
                    self.errors[fp] = [1, tool, message, step, "", 0]
            else:
                entry[0] += 1
            self.open_error = [fp, tool, step]
            return
        if self.open_error and self.open_error[1] == tool:
            fp, _, error_step = self.open_error
            entry = self.errors.get(fp)
            if entry is not None and not entry[4]:
                entry[4] = ((call[2] if tool == "Bash" else call[0]) if call else tool)[:200]
                entry[5] = max(0, step - error_step)
            self.open_error = None
        if tool == "Grep" and call:
            entry = self.greps.get(call[0])
            if entry is not None and not result.strip():
                entry[1] += 1
        elif tool == "Glob" and call:
            files = [line.strip() for line in result.splitlines() if line.strip()][:200]
            if call[0] not in self.globs and len(self.globs) < MAX_LIST:
                self.globs[call[0]] = [len(files), 0, call[1]]
                for path in files:
                    if len(self.glob_files) < MAX_FILES:
                        self.glob_files.setdefault(
                            text_rules.printable_path(path).removeprefix("./"), call[0]
                        )
        elif tool == "Read" and call and call[2]:
            names = set()
            for match in _IMPORT_LINE.finditer(result[:20_000]):
                target = next(g for g in match.groups() if g)
                names.add(target.rsplit("/", 1)[-1].rsplit(".", 1)[-1])
            if names:
                self.last_imports = [call[2], step, sorted(names)[:100]]

    def _e2e_result(self, tool: str, step: int, result: str, is_error: bool) -> None:
        target = self.e2e_call[2] if self.e2e_call and self.e2e_call[1] == tool else ""
        self.e2e_call = None
        if len(self.e2e) < e2e.MAX_CALLS:
            self.e2e.append([step, tool, target, is_error, result[:500]])

    def _reasoning(self, event: dict[str, Any]) -> None:
        body = event.get("text") or ""
        step = event.get("step") or self.step
        current = self.recent[-1][0] if self.recent else ""
        found = text_rules.self_correction(body)
        if found and len(self.corrections) < MAX_LIST:
            self.corrections.append([step, found[0], found[1], current])
            if "self_correction" not in self.early:
                self.early.append("self_correction")
        sentence = text_rules.dead_end_sentence(body)
        if sentence and len(self.dead_ends) < MAX_LIST:
            self.dead_ends.append([step, sentence, current])
        if "MEMORY:" in body:
            for memory_type, content in text_rules.MEMORY_LINE.findall(body):
                self._note({"type": memory_type, "content": content}, event)

    def _step_complete(self, event: dict[str, Any]) -> None:
        tokens_in = event.get("input_tokens") or 0
        self.tokens[0] += tokens_in
        self.tokens[1] += event.get("output_tokens") or 0
        self.tokens[2] = max(self.tokens[2], tokens_in)
        self.tokens[3] += 1

    def _note(self, memory: dict[str, Any], event: dict[str, Any]) -> None:
        content = str(memory.get("content", "")).strip()
        if not content or len(self.notes) >= MAX_NOTES:
            return
        files = memory.get("related_files") or ([self.recent[-1][0]] if self.recent else [])
        self.notes.append(
            {
                "type": str(memory.get("type") or "gotcha")[:40],
                "content": content[:4000],
                "related_files": [str(f)[:500] for f in files][:20],
                "step": event.get("step") or self.step,
                "seq": event.get("seq"),
            }
        )

    # ------------------------------------------------------------ reading

    def edited(self) -> list[str]:
        return [path for path, entry in self.files.items() if entry[1]]

    def read_only(self) -> list[str]:
        return [path for path, entry in self.files.items() if entry[0] and not entry[1]]

    def modules(self) -> list[str]:
        """Modules this session worked in: of edited files, else of every file accessed."""
        paths = self.edited() or list(self.files)
        return text_rules.modules_of(paths)

    def recent_files(self, steps: int = 5) -> list[str]:
        floor = self.step - steps
        return [path for path, step in self.recent if step >= floor]

    def recent_searches(self) -> list[str]:
        found = []
        for key in ("Grep", "Glob"):
            if key in self.pending and self.pending[key]:
                found.append(self.pending[key][0])
        for pattern, entry in self.greps.items():
            if entry[2] >= self.step - 3:
                found.append(pattern)
        return list(dict.fromkeys(found))[:3]

    # ------------------------------------------------------------ checkpoint

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items()}
        data["seen_extra"] = sorted(self.seen_extra)
        data["promoted_keys"] = sorted(self.promoted_keys)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scratchpad:
        pad = cls(data.get("session_type", "build"))
        for key, value in data.items():
            if key in pad.__dict__:
                setattr(pad, key, value)
        pad.seen_extra = set(pad.seen_extra)
        pad.promoted_keys = set(pad.promoted_keys)
        return pad
