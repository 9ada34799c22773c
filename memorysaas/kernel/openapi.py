"""What the OpenAPI document says beyond the models' own field types, so that a request the
schema admits is one the API accepts (tests/test_api_contract.py holds the API to it).

- Text: patterns for the checks JSON Schema has no keyword for (no NUL, more than whitespace,
  one printable line), on every string a request sends (`describe_request_text`).
- Rules between fields, as JSON Schema keywords on a model (`with_schema`, `change_schema`).
- Links: what an answer's ids lead to (`link`, `links`), for clients and schemathesis's stateful
  phase; `openapi_extra` merges an operation's extras.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

# No NUL anywhere: PostgreSQL text cannot store one, so every request refuses it.
NO_NUL = r"^[^\u0000]*$"
# Whitespace as str.isspace() sees it: what a check that calls .strip() takes away (a superset
# of the Unicode White_Space that pydantic's `str_strip_whitespace` strips).
SPACE_CHARS = r"\t-\r\u001c-\u001f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_SPACE = rf"[^{SPACE_CHARS}]"
# Stripped text that may not be empty: more than whitespace.
NOT_BLANK = rf"^[^\u0000]*[^\u0000{SPACE_CHARS}][^\u0000]*$"
# A path that names a file once `./`, slashes and whitespace around it are taken away.
SOME_PATH = rf"[^{SPACE_CHARS}/\\.]"
# A name: one line of printable text (no C0/C1 control character), not blank.
_CONTROL = r"\u0000-\u001f\u007f-\u009f"
ONE_LINE = rf"^[^{_CONTROL}]*[^{_CONTROL}{SPACE_CHARS}][^{_CONTROL}]*$"

COMPONENTS = "#/components/schemas/"
# What a free-form object (a payload, a tool call's arguments) holds, all the way down.
JSON_VALUE = {
    "title": "JsonValue",
    "description": "Any JSON value whose text (keys too) holds no NUL.",
    "anyOf": [
        {"type": "string", "pattern": NO_NUL},
        {"type": ["number", "boolean", "null"]},
        {"type": "array", "items": {"$ref": f"{COMPONENTS}JsonValue"}},
        {
            "type": "object",
            "additionalProperties": {"$ref": f"{COMPONENTS}JsonValue"},
            "propertyNames": {"pattern": NO_NUL},
        },
    ],
}
_FREE_OBJECT = {
    "additionalProperties": {"$ref": f"{COMPONENTS}JsonValue"},
    "propertyNames": {"pattern": NO_NUL},
}
# A string schema these already confine (a uuid, a date, one of a list, a pattern of its own).
_CONFINED = frozenset({"pattern", "format", "enum", "const"})
# Where memorysaas.urls mounts the API: operation paths in the OpenAPI document start with it.
API_ROOT = "/api/v1"


def describe_request_text(operation: dict[str, Any], components: dict[str, Any]) -> None:
    """Every string an operation's request sends (parameters, bodies, the models they name) says
    it holds no NUL, and every free-form object that its values do (JsonValue, which
    `components` must hold)."""
    seen: set[str] = set()
    stack: list[Any] = [operation.get("parameters", []), operation.get("requestBody", {})]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(COMPONENTS) and ref not in seen:
            seen.add(ref)
            stack.append(components.get(ref.removeprefix(COMPONENTS)))
        if node.get("type") == "string" and not _CONFINED.intersection(node):
            node["pattern"] = NO_NUL
        free = node.get("additionalProperties", True) is True and "properties" not in node
        if node.get("type") == "object" and free:
            node.update(_FREE_OBJECT)
        stack.extend(value for key, value in node.items() if key not in ("examples", "example", "default"))


def _string_schemas(node: Any):
    """The string schemas in a property's schema (inside anyOf, items, ...), not behind a $ref."""
    if isinstance(node, dict):
        if node.get("type") == "string":
            yield node
        for value in node.values():
            yield from _string_schemas(value)
    elif isinstance(node, list):
        for value in node:
            yield from _string_schemas(value)


def stripped_text_schema(schema: dict[str, Any], model: type | None = None) -> None:
    """`json_schema_extra` of a model that strips its strings: a string that may not be empty
    must hold more than whitespace (stripped, "  " is empty)."""
    for prop in schema.get("properties", {}).values():
        for text in _string_schemas(prop):
            if text.get("minLength", 0) >= 1 and "pattern" not in text and "format" not in text:
                text["pattern"] = NOT_BLANK


def with_schema(keywords: dict[str, Any]) -> Any:
    """`json_schema_extra` of an input model that checks more than its fields' own types: the
    JSON Schema `keywords` that say the same (`anyOf`, `if`/`then`), beside the stripped text."""

    def extra(schema: dict[str, Any], model: type | None = None) -> None:
        stripped_text_schema(schema)
        schema.update(copy.deepcopy(keywords))

    return extra


def change_schema(*, nullable: frozenset[str] = frozenset(), like: type[BaseModel] | None = None) -> Any:
    """`json_schema_extra` of a body that changes some fields (a PATCH): at least one field, and
    each field left out or given a value (null only for the `nullable` ones, where it clears the
    value). The model declares its fields `X | None = None` to tell "left out" from a value. With
    `like`, a field takes the values that model's field of the same name takes (and the model's
    rules between fields), since the change is checked against it."""

    def extra(schema: dict[str, Any], model: type | None = None) -> None:
        stripped_text_schema(schema)
        schema["minProperties"] = 1
        template = inline_refs(like.model_json_schema()) if like is not None else {"properties": {}}
        for name, prop in schema.get("properties", {}).items():
            value = template["properties"].get(name)
            if value is not None:
                value = {k: v for k, v in value.items() if k not in ("default", "title")}
                prop.clear()
                prop.update({"anyOf": [value, {"type": "null"}]} if name in nullable else value)
            elif name not in nullable and prop.get("anyOf"):
                values = [branch for branch in prop["anyOf"] if branch != {"type": "null"}]
                prop.pop("default", None)
                prop.pop("anyOf")
                prop.update(values[0] if len(values) == 1 else {"anyOf": values})
        if template.get("allOf"):
            schema["allOf"] = template["allOf"]

    return extra


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic model's JSON schema with its `$defs` written in where they are referred to, for
    a schema placed inside another document (where `#/$defs/...` would point at that document's
    root). For models that do not refer to themselves."""
    definitions = schema.get("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return resolve({**definitions[ref.removeprefix("#/$defs/")], **rest})
            return {key: resolve(value) for key, value in node.items() if key != "$defs"}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    return resolve(schema)


def link(method: str, path: str, **parameters: str) -> dict[str, Any]:
    """An OpenAPI link to the operation `method path` (a path under API_ROOT), its parameters as
    runtime expressions (`$response.body#/id`, `$request.path.project_id`)."""
    pointer = (API_ROOT + path).replace("~", "~0").replace("/", "~1")
    return {"operationRef": f"#/paths/{pointer}/{method.lower()}", "parameters": parameters}


def links(status: int, **named: dict[str, Any]) -> dict[str, Any]:
    """An operation's `openapi_extra` declaring what its `status` answer leads to: what a client
    may call next with the ids it got."""
    return {"responses": {status: {"links": named}}}


def openapi_extra(*parts: dict[str, Any]) -> dict[str, Any]:
    """Several `openapi_extra` dicts (links, conflicts, a body) as one, merged key by key."""
    merged: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = openapi_extra(merged[key], value)
            else:
                merged[key] = value
    return merged
