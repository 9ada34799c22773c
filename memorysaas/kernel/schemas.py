"""Schema bases shared by every app's API."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Annotated, Any

from ninja import Schema
from pydantic import AfterValidator, ConfigDict, Field, model_validator

from memorysaas.kernel.jsontypes import JsonTyped
from memorysaas.kernel.openapi import ONE_LINE, stripped_text_schema

# How deep a request's JSON may nest. Real payloads (a tool call's arguments, a recipe's steps)
# stay within a handful of levels; a deeper one is refused before anything walks it, since
# every walker (the NUL check, the secret scanner) would otherwise meet Python's recursion limit.
MAX_DEPTH = 64


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} is beyond a float's range")
    return value


def parse_json(body: bytes) -> Any:
    """A request body as JSON: ApiError 400 when it is not JSON (NaN, Infinity and floats out of
    range are not; an integer longer than Python converts, 4,300 digits, is not read), 422 when it
    nests so deep that the parser itself gives up (Python's recursion limit, near a thousand levels)."""
    from memorysaas.kernel.errors import ApiError

    try:
        # UTF-8 only (RFC 8259 §8.1): json.loads would guess UTF-16 or UTF-32 from the bytes,
        # and the raw-body checks for escaped NULs and surrogates read UTF-8.
        return json.loads(body.decode("utf-8-sig"), parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ApiError(422, f"The body nests deeper than {MAX_DEPTH} levels.") from None
    except ValueError as exc:  # not JSON, not UTF-8, or a number too long to convert
        raise ApiError(400, f"The body is not valid JSON: {exc}", code="malformed_json") from None


def _walk(value: Any, path: str = ""):
    """Every (path, depth, item) in a JSON-like value, keys included, without recursion."""
    stack = [(path, 1, value)]
    while stack:
        where, depth, item = stack.pop()
        yield where, depth, item
        if isinstance(item, dict):
            children = []
            for key, child in item.items():
                children.append((where, depth, key))
                children.append((f"{where}.{key}" if where else str(key), depth + 1, child))
            stack.extend(reversed(children))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed([(f"{where}[{i}]", depth + 1, child) for i, child in enumerate(item)]))


# Characters PostgreSQL text cannot hold: NUL, and lone UTF-16 surrogates (JSON's "\ud800"
# escapes one; it is no character at all, so it has no UTF-8 form).
_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")
# The same in a raw JSON body, escaped (as raw bytes neither would have parsed): a cheap test
# before walking a large body.
ESCAPED_UNSTORABLE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


def find_unstorable_char(value: Any, path: str = "") -> str | None:
    """Where in `value` (keys included) a character PostgreSQL cannot store is and what it is,
    as a sentence, if anywhere."""
    for where, _, item in _walk(value, path):
        if not isinstance(item, str) or (item.isascii() and "\x00" not in item):
            continue
        if found := _UNSTORABLE_CHAR.search(item):
            char = found.group()
            what = "a NUL (\\u0000) character" if char == "\x00" else f"a lone surrogate (\\u{ord(char):04x})"
            return f"{where or 'body'} contains {what}, which cannot be stored"
    return None


def find_too_deep(value: Any, path: str = "", limit: int = MAX_DEPTH) -> str | None:
    """Where `value` nests deeper than `limit` levels, if anywhere."""
    for where, depth, _ in _walk(value, path):
        if depth > limit:
            return where or "body"
    return None


def refuse_unstorable(data: Any, path: str = "") -> None:
    """A ValueError naming where `data` holds a NUL or nests too deep."""
    where = find_too_deep(data, path)
    if where:
        raise ValueError(f"{where} nests deeper than {MAX_DEPTH} levels")
    found = find_unstorable_char(data, path)
    if found:
        raise ValueError(found)


def single_line(value: str) -> str:
    """A name shown in lists and emails: no control characters (newlines, escapes, bells)."""
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise ValueError("a name is one line of printable text, without control characters")
    return value


Name = Annotated[
    str,
    Field(min_length=1, max_length=120, json_schema_extra={"pattern": ONE_LINE}),
    AfterValidator(single_line),
]


class InputSchema(Schema, JsonTyped):
    """Request bodies refuse fields they do not know (a typo is a 422, not a silent no-op), NUL
    characters, which PostgreSQL text cannot store, and JSON nested deeper than MAX_DEPTH. Numbers
    and booleans keep their JSON types (`true` is not 1, `"3"` is not 3)."""

    model_config = ConfigDict(
        extra="forbid", str_strip_whitespace=True, json_schema_extra=stripped_text_schema
    )

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        refuse_unstorable(data)
        return data


class QuerySchema(InputSchema):
    """Query parameters: text by nature, so `?limit=5` and `?unread=true` convert."""

    json_types = False


class OutputSchema(Schema):
    pass
