"""The code-aware tokenizer (search/codetokens.py): identifiers by their parts, paths and dotted
names whole, CJK by character pairs, and the keyword vector's literal."""

from __future__ import annotations

import pytest

from apps.memories.search import codetokens


@pytest.mark.parametrize(
    ("token", "code_like"),
    [
        ("verifyJwt", True),
        ("verify_jwt", True),
        ("auth/tokens.ts", True),
        ("django.db.models", True),
        ("QuerySet", True),
        ("utf8", True),
        ("__init__", True),
        ("Hello", False),
        ("HTTP", False),
        ("well-known", False),
        ("tokens", False),
    ],
)
def test_is_code_like(token, code_like):
    assert codetokens.is_code_like(token) is code_like


@pytest.mark.parametrize(
    ("token", "parts"),
    [
        ("verifyJwt", ["verify", "jwt"]),
        ("verify_jwt", ["verify", "jwt"]),
        ("HTTPServer", ["http", "server"]),
        ("auth/tokens.ts", ["auth", "tokens", "ts"]),
        ("django/db/models/query.py", ["django", "db", "models", "query", "py"]),
        ("qs.select_for_update", ["qs", "select", "for", "update"]),
    ],
)
def test_split_parts(token, parts):
    assert codetokens.split_parts(token) == parts


def test_camel_and_snake_spellings_of_one_name_share_a_joined_lexeme():
    camel, snake = codetokens.analyze("verifyJwt"), codetokens.analyze("verify_jwt")
    assert camel.whole == ["verifyjwt"]
    assert snake.whole == ["verify_jwt", "verifyjwt"]
    assert camel.words == snake.words == "verify jwt"


def test_analyze_keeps_paths_and_dotted_names_whole_and_by_parts():
    terms = codetokens.analyze("Call verifyJwt in auth/tokens.ts before qs.select_for_update runs.")
    assert terms.whole == [
        "verifyjwt",
        "auth/tokens.ts",
        "authtokensts",
        "qs.select_for_update",
        "qsselectforupdate",
        "select_for_update",
    ]
    assert terms.words.split() == [
        "Call", "verify", "jwt", "in", "auth", "tokens", "ts", "before",
        "qs", "select", "for", "update", "runs", ".",
    ]  # fmt: skip


def test_plain_prose_yields_no_whole_lexemes():
    terms = codetokens.analyze("The well-known cache expires Hourly.")
    assert terms.whole == []
    assert terms.words.split() == ["The", "well", "known", "cache", "expires", "Hourly", "."]


def test_double_colon_paths_are_kept_whole_and_by_parts():
    terms = codetokens.analyze("use std::vector here")
    assert terms.whole == ["std::vector", "stdvector"]
    assert terms.words.split() == ["use", "std", "vector", "here"]


def test_cjk_runs_are_indexed_by_their_character_pairs():
    # written without spaces, a run was one word: a word inside it could not be matched
    assert codetokens.cjk_grams("缓存键在部署时 verifyJwt 鍵 キャッシュ 캐시") == [
        "缓存", "存键", "键在", "在部", "部署", "署时", "鍵", "キャ", "ャッ", "ッシ", "シュ", "캐시",
    ]  # fmt: skip
    terms = codetokens.analyze("verifyJwt 缓存键")
    assert terms.whole == ["verifyjwt", "缓存", "存键"]
    assert codetokens.analyze("Crème brûlée, naïve").whole == []  # accented Latin is not CJK


def test_paths_under_an_agents_repository_root_are_made_relative():
    from apps.memories.validation import clean_paths, clean_root

    assert clean_root("/") == "" and clean_root(" /home/ada/src/shop/ ") == "/home/ada/src/shop"
    shop = clean_root("/home/ada/src/shop")
    paths = ["/home/ada/src/shop/x.py", "/home/ada/src/shop2/y.py", "/home/ADA/src/shop/z.py", "./w.py"]
    assert clean_paths(paths, shop) == ["x.py", "/home/ada/src/shop2/y.py", "/home/ADA/src/shop/z.py", "w.py"]
    windows = clean_root("C:\\Users\\Ada\\shop\\")
    assert windows == "C:/Users/Ada/shop"  # a Windows path names the same file in any case
    assert clean_paths(["c:\\users\\ada\\shop\\a.py", "C:/Users/Ada/shop2/b.py"], windows) == [
        "a.py",
        "C:/Users/Ada/shop2/b.py",
    ]


def test_tsvector_literal_quotes_and_repeats_positions():
    literal = codetokens.tsvector_literal([("it's", "A"), ("x", "B"), ("x", "C"), ("y" * 201, "A")])
    assert literal == "'it''s':1A 'x':2B,3C"
    assert codetokens.tsquery_any(["a", "b", "a", ""]) == "'a' | 'b'"
