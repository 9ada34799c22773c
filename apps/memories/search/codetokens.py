"""Code-aware tokenization for the keyword path, and the PostgreSQL literals built from it.

The tokenizer (identifiers whole and by parts, CJK character pairs) lives in the client
distribution, `memorysaas_client.codetokens`: a device's offline replica must index text exactly as
the server does, so both import that one module. What only PostgreSQL needs stays here.
"""

from __future__ import annotations

from collections.abc import Iterable

from memorysaas_client.codetokens import CJK_CLASS as CJK_CLASS
from memorysaas_client.codetokens import Terms as Terms
from memorysaas_client.codetokens import analyze as analyze
from memorysaas_client.codetokens import analyze_fields as analyze_fields
from memorysaas_client.codetokens import cjk_grams as cjk_grams
from memorysaas_client.codetokens import is_code_like as is_code_like
from memorysaas_client.codetokens import split_parts as split_parts


def _quote_lexeme(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector_literal(weighted: Iterable[tuple[str, str]], *, max_lexeme: int = 200) -> str:
    """A tsvector literal for (lexeme, weight) pairs; repeated lexemes get repeated positions."""
    positions: dict[str, list[str]] = {}
    for position, (lexeme, weight) in enumerate(weighted, start=1):
        if not lexeme or len(lexeme) > max_lexeme:
            continue
        positions.setdefault(lexeme, []).append(f"{min(position, 16383)}{weight}")
    return " ".join(f"{_quote_lexeme(lex)}:{','.join(pos)}" for lex, pos in positions.items())


def tsquery_any(lexemes: Iterable[str], *, joint: str = " | ") -> str:
    """An OR tsquery over verbatim lexemes (no parsing or stemming applied again); AND with
    `joint=" & "`."""
    return joint.join(_quote_lexeme(lex) for lex in dict.fromkeys(lexemes) if lex)
