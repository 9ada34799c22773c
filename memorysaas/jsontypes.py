"""JSON's own types for numbers and booleans, kept: pydantic's lax mode turns `true` into 1,
`"3"` into 3 and `"yes"` into True, so a client's mistake was stored as something it never said
(`{"level": true}` set trust level 1). Pure pydantic: payload schemas use it too."""

from __future__ import annotations

import types
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

from pydantic import BaseModel, Strict

_SCALARS = (bool, int, float)


def is_scalar(annotation: Any) -> bool:
    """Whether a field takes only numbers or booleans (or null)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return is_scalar(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        return bool(args) and all(is_scalar(arg) for arg in args)
    return annotation in _SCALARS


class JsonTyped(BaseModel):
    """A body model whose number fields take JSON numbers (an integer where an integer is asked
    for) and whose boolean fields take JSON booleans: pydantic's strict mode, field by field, so
    ids and times still parse from their JSON strings."""

    # Off for query strings, where every value arrives as text.
    json_types: ClassVar[bool] = True

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if not cls.json_types:
            return
        loose = [
            field
            for field in cls.model_fields.values()
            if is_scalar(field.annotation) and not any(isinstance(m, Strict) for m in field.metadata)
        ]
        for field in loose:
            field.metadata.append(Strict())
        if loose:
            cls.model_rebuild(force=True)
