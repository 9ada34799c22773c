"""The text a memory and a query are embedded as (embedding/contextual.py)."""

from __future__ import annotations

from apps.memories.embedding.contextual import memory_embedding_text, query_embedding_text


def test_memory_embedding_text_puts_files_module_and_type_before_the_content():
    text = memory_embedding_text(
        memory_type="gotcha",
        content="verifyJwt rejects skewed clocks.",
        related_files=["auth/tokens.ts", "auth/clock.ts"],
        related_modules=["auth", "core"],
    )
    assert (
        text
        == "Files: auth/tokens.ts, auth/clock.ts | Module: auth | Type: gotcha\n\nverifyJwt rejects skewed clocks."
    )


def test_memory_embedding_text_adds_the_context_prefix_first_and_extra_after_the_content():
    text = memory_embedding_text(
        memory_type="dead_end",
        content="Raising the skew did not help.",
        context_prefix="In the token service:",
        extra="raise the clock skew tokens were expired",
    )
    assert text == (
        "In the token service:\nType: dead_end\n\nRaising the skew did not help.\n"
        "raise the clock skew tokens were expired"
    )


def test_query_embedding_text_is_the_trimmed_query():
    assert query_embedding_text("  verifyJwt skew \n") == "verifyJwt skew"
