"""Memory types (kinds.py): Dex aliases map to their types, an unknown type is refused."""

from __future__ import annotations

import pytest

from apps.memories.kinds import normalize_type

# Dex type names and the memory types they are stored as.
DEX_ALIASES = [
    ("architecture", "module_insight"),
    ("dependency", "module_insight"),
    ("constraint", "requirement"),
    ("convention", "preference"),
    ("pitfall", "gotcha"),
    ("fix", "error_pattern"),
]


@pytest.mark.parametrize(
    ("alias", "v5_type"), [*DEX_ALIASES, (" Pitfall ", "gotcha"), ("dead_end", "dead_end")]
)
def test_dex_aliases_map_to_v5_types(alias, v5_type):
    assert normalize_type(alias) == v5_type


def test_an_unknown_type_is_refused():
    with pytest.raises(ValueError):
        normalize_type("nonsense")
