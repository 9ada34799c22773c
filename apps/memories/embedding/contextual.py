"""The text a memory is embedded from: its context first, then its content.

Pure: no Django. Anthropic-style contextual embeddings adapted for code memories — the files,
module and type the memory is about are prepended so that two similar sentences about
different files land apart.
"""

from __future__ import annotations

from collections.abc import Sequence


def memory_embedding_text(
    *,
    memory_type: str,
    content: str,
    related_files: Sequence[str] = (),
    related_modules: Sequence[str] = (),
    context_prefix: str = "",
    extra: str = "",
) -> str:
    header = [
        f"Files: {', '.join(related_files)}" if related_files else None,
        f"Module: {related_modules[0]}" if related_modules else None,
        f"Type: {memory_type}",
    ]
    prefix = " | ".join(part for part in header if part)
    body = content if not extra else f"{content}\n{extra}"
    if context_prefix:
        prefix = f"{context_prefix}\n{prefix}"
    return f"{prefix}\n\n{body}"


def query_embedding_text(query: str) -> str:
    return query.strip()
