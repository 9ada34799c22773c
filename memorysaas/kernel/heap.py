"""Keeping the garbage collector's full passes short in a long-running server.

A web process holds a few hundred thousand objects that live as long as it does: modules,
settings, URL patterns, the local models' tokenizers and sessions. Python's full collection
walks every one of them, which took ~150 ms on the development machine, and the request that
happened to allocate at that moment waited for it: a search's slowest answers were those. Once
they are made, `freeze_long_lived()` moves them to the collector's permanent generation, so its
passes walk only what requests make.
"""

from __future__ import annotations

import gc


def freeze_long_lived() -> None:
    """Collect what is garbage now (frozen garbage would never be freed), then freeze the rest.
    Called again once the models are loaded: each call freezes what exists by then."""
    gc.collect()
    gc.freeze()
