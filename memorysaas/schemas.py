"""Schema bases shared by every app's API."""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any

from ninja import Schema
from pydantic import AfterValidator, ConfigDict, Field, model_validator


def find_nul(value: Any, path: str = "") -> str | None:
    """Where in `value` a NUL character is (a dotted path), if anywhere."""
    if isinstance(value, str):
        return path or "body" if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = find_nul(key, path) or find_nul(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found = find_nul(item, f"{path}[{index}]")
            if found:
                return found
    return None


def single_line(value: str) -> str:
    """A name shown in lists and emails: no control characters (newlines, escapes, bells)."""
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise ValueError("a name is one line of printable text, without control characters")
    return value


Name = Annotated[str, Field(min_length=1, max_length=120), AfterValidator(single_line)]


class InputSchema(Schema):
    """Request bodies refuse fields they do not know (a typo is a 422, not a silent no-op) and
    NUL characters, which PostgreSQL text cannot store."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    @model_validator(mode="before")
    @classmethod
    def _no_nul_characters(cls, data: Any) -> Any:
        where = find_nul(data)
        if where:
            raise ValueError(f"{where} contains a NUL (\\u0000) character, which cannot be stored")
        return data


class OutputSchema(Schema):
    pass


class ErrorBody(Schema):
    code: str
    message: str
    details: object | None = None


class ErrorEnvelope(Schema):
    error: ErrorBody
