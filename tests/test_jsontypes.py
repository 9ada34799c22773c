"""JsonTyped: JSON numbers and booleans stay what they are, in lists and maps too; a subclass for
query strings turns that off again."""

from __future__ import annotations

import pytest
from pydantic import Field, ValidationError

from memorysaas.kernel.jsontypes import JsonTyped


class Body(JsonTyped):
    count: int = Field(1, ge=1)
    ratio: float | None = None
    flag: bool = False
    ids: list[int] = []
    weights: dict[str, float] = {}
    names: list[str] = []


class Query(Body):
    json_types = False


@pytest.mark.parametrize(
    "data",
    [{"count": True}, {"count": "2"}, {"ratio": False}, {"flag": "yes"}, {"flag": 1}, {"ids": ["3"]},
     {"ids": [True]}, {"weights": {"a": True}}],
)  # fmt: skip
def test_a_body_refuses_what_lax_mode_would_convert(data):
    with pytest.raises(ValidationError) as caught:
        Body.model_validate(data)
    assert caught.value.errors()[0]["loc"][0] == next(iter(data))
    assert Query.model_validate(data)  # text from a query string converts


def test_json_numbers_and_strings_still_validate_as_before():
    body = Body.model_validate({"count": 2, "ratio": 1, "ids": [1, 2], "weights": {"a": 0.5}, "names": ["x"]})
    assert (body.count, body.ratio, body.ids, body.weights) == (2, 1.0, [1, 2], {"a": 0.5})
    with pytest.raises(ValidationError):
        Query.model_validate({"count": 0})  # the field's own constraints stay


def test_a_whole_number_written_with_a_fraction_is_an_integer():
    """JSON has one number type, and OpenAPI's `integer` admits 12.0: a search's `"limit": 12.0`
    was refused. A fraction is still refused, and so is what lax mode would convert."""
    body = Body.model_validate({"count": 12.0, "ids": [1.0, 2]})
    assert (body.count, body.ids) == (12, [1, 2]) and type(body.count) is int
    for data in ({"count": 12.5}, {"ids": [1.5]}, {"count": 0.0}, {"count": True}):
        with pytest.raises(ValidationError):
            Body.model_validate(data)
