"""Schema bases shared by every app's API."""

from __future__ import annotations

from ninja import Schema
from pydantic import ConfigDict


class InputSchema(Schema):
    """Request bodies refuse fields they do not know: a typo is a 422, not a silent no-op."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class OutputSchema(Schema):
    pass


class ErrorBody(Schema):
    code: str
    message: str
    details: object | None = None


class ErrorEnvelope(Schema):
    error: ErrorBody
