"""JSON's own types for numbers and booleans, kept: pydantic's lax mode turns `true` into 1,
`"3"` into 3 and `"yes"` into True, so a client's mistake was stored as something it never said
(`{"level": true}` set trust level 1). A whole number written with a fraction (`12.0`) is still an
integer: JSON has one number type, and the OpenAPI schema's `integer` admits it. Pure pydantic:
payload schemas use it too."""

from __future__ import annotations

import types
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, Strict

_SCALARS = (bool, int, float)
_CONTAINERS = (list, tuple, set, frozenset, dict)


class _JsonStrict(Strict):
    """The strictness JsonTyped adds (told apart from a field's own, so a subclass that turns
    JSON types off can take it away again)."""


_STRICT = _JsonStrict()


def _whole_number(value: Any) -> Any:
    """`12.0` as 12 (strict mode refuses any float for an int; `12.5` still fails there)."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


class _JsonWhole(BeforeValidator):
    """The conversion JsonTyped adds before an int's strict check (told apart like _JsonStrict)."""


_WHOLE = _JsonWhole(_whole_number)
_OURS = (_JsonStrict, _JsonWhole)


def _takes_int(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _takes_int(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return any(_takes_int(arg) for arg in get_args(annotation))
    return annotation is int


def _json_metadata(annotation: Any) -> list[Any]:
    """What JsonTyped adds to a number or boolean field: strictness, and for an int the
    conversion of a whole float before it."""
    return [_STRICT, _WHOLE] if _takes_int(annotation) else [_STRICT]


def is_scalar(annotation: Any) -> bool:
    """Whether a field takes only numbers or booleans (or null)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return is_scalar(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return bool(args) and all(is_scalar(arg) for arg in args)
    return annotation in _SCALARS


def strict_items(annotation: Any, strict: bool = True) -> Any:
    """`annotation` with the numbers and booleans inside containers (`list[int]`,
    `dict[str, float] | None`) strict, or, with `strict=False`, made lax again."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        base, *meta = args
        meta = [m for m in meta if not isinstance(m, _OURS)]
        if base not in _SCALARS:
            inner = strict_items(base, strict)
        else:  # (ours after the field's own constraints, so its schema keeps them: `minimum`)
            inner = base
            meta.extend(_json_metadata(base) if strict else ())
        return Annotated[(inner, *meta)] if meta else inner
    if annotation in _SCALARS:
        return Annotated[(annotation, *_json_metadata(annotation))] if strict else annotation
    if origin in (Union, types.UnionType):
        return Union[tuple(strict_items(arg, strict) for arg in args)]  # noqa: UP007
    if origin in _CONTAINERS and args:
        return origin[tuple(arg if arg is Ellipsis else strict_items(arg, strict) for arg in args)]
    return annotation


class JsonTyped(BaseModel):
    """A body model whose number fields take JSON numbers (an integer where an integer is asked
    for) and whose boolean fields take JSON booleans, in lists and maps too: pydantic's strict
    mode, field by field, so ids and times still parse from their JSON strings."""

    # Off for query strings, where every value arrives as text.
    json_types: ClassVar[bool] = True

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        changed = False
        for field in cls.model_fields.values():
            if is_scalar(field.annotation):
                ours = [m for m in field.metadata if isinstance(m, _OURS)]
                if cls.json_types and not any(isinstance(m, Strict) for m in field.metadata):
                    field.metadata.extend(_json_metadata(field.annotation))
                    changed = True
                elif not cls.json_types and ours:
                    field.metadata[:] = [m for m in field.metadata if not isinstance(m, _OURS)]
                    changed = True
                continue
            annotation = strict_items(field.annotation, cls.json_types)
            if annotation != field.annotation:
                field.annotation = annotation
                changed = True
        if changed:
            cls.model_rebuild(force=True)
