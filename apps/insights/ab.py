"""Which A/B group a session joins (pure: no Django).

The split hashes `"{session_id}:{project_id}"` with 32-bit MurmurHash3 (seed 0, unsigned) into a
bucket 0–99: buckets below the control share are control, the next `passive` buckets are
passive, the rest full. The same session always lands in the same group, on any machine.

What each group is given:
- control: nothing (still observed, so it is the baseline);
- passive: only what is injected before the agent starts working, the session-start plan and the
  context for the user's prompt (the system prompt and initial message tiers);
- full: everything, including the file notes added before an edit and step injection.
"""

from __future__ import annotations

from dataclasses import dataclass

import mmh3

CONTROL, PASSIVE, FULL = "control", "passive", "full"
DEFAULT_CONTROL_PCT = 5
DEFAULT_PASSIVE_PCT = 10
LEGACY_GROUPS = {"memory": FULL}  # sessions assigned before the three-way split


@dataclass(frozen=True)
class Split:
    enabled: bool = True
    control_pct: int = DEFAULT_CONTROL_PCT
    passive_pct: int = DEFAULT_PASSIVE_PCT


def bucket(session_id: object, project_id: object) -> int:
    return mmh3.hash(f"{session_id}:{project_id}", 0, signed=False) % 100


def assign(session_id: object, project_id: object, split: Split) -> str:
    if not split.enabled:
        return FULL
    b = bucket(session_id, project_id)
    if b < split.control_pct:
        return CONTROL
    if b < split.control_pct + split.passive_pct:
        return PASSIVE
    return FULL


def canonical(group: str) -> str:
    return LEGACY_GROUPS.get(group, group)


def withholds_active(group: str) -> bool:
    """True when the group is given no mid-session injection (file notes, step injection)."""
    return group in (CONTROL, PASSIVE)
