"""Field types shared by the payload models.

Agents write their signals as hand-typed YAML, so a few lenient conversions are applied at the edge of
the model (never deeper): a multi-line field written as a YAML list becomes one line per item, a scalar
that YAML resolved to a number becomes its text (as written: ``0755``, ``1.10``, an id of digits), a
value of a closed set matches in any case and with spaces, hyphens or underscores alike
(:class:`LenientEnum`), a percentage may carry its ``%`` sign, and a signal's timestamp may be written in
ISO 8601's basic format (``20260111T100000Z``). Timestamps are otherwise the one strict field: one
without a time zone is rejected, because ordering signals from several machines needs an absolute
instant.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import date, datetime
from enum import StrEnum
from functools import cache
from typing import Annotated, Any, Final, Self, TypeVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic_core import PydanticCustomError

from bus.quoting import cut

__all__ = [
    "Confidence",
    "LenientEnum",
    "Model",
    "NonBlankText",
    "OpenModel",
    "Percent",
    "SignalTimestamp",
    "Text",
    "Timestamp",
    "trusted_instance",
]


def _to_text(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # a null item (``-`` or ``~``) is no line: nothing the agent wrote
        return "\n".join(str(_to_text(item)) for item in value if item is not None)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, date, datetime)):
        return str(value)
    if isinstance(value, dict):
        return "\n".join(
            f"{key}:" if item is None else f"{key}: {_to_text(item)}" for key, item in value.items()
        )
    return value


Text = Annotated[str, BeforeValidator(_to_text)]
"""A free-text field; YAML lists and scalars are folded into text."""


def _not_blank(value: str) -> str:
    if value.isspace() or not value:
        raise PydanticCustomError("blank", "must not be blank")
    return value


NonBlankText = Annotated[
    Text, AfterValidator(_not_blank), Field(json_schema_extra={"minLength": 1, "pattern": r"\S"})
]
"""A free-text field that must say something (not empty, not only white space); the JSON Schema says so
to other languages' publishers."""

Timestamp = AwareDatetime
"""An ISO-8601 instant that must carry a time zone."""

_BASIC: Final = re.compile(
    r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2}(?:[.,]\d+)?)?(Z|[+-]\d{2}(?::?\d{2})?)", re.ASCII
)


_NUMBER: Final = re.compile(r"\s*[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\s*", re.ASCII)


def _extended(value: Any) -> Any:
    """ISO 8601's basic format (``20260111T100000Z``, ``20260111T1000+0100``) in its extended one.

    A number is refused: pydantic would take it for Unix time, and an agent that writes the date
    ``20261129`` (a YAML integer, or a string of digits) means no instant of 1970."""
    if (isinstance(value, int | float) and not isinstance(value, bool)) or (
        type(value) is str and _NUMBER.fullmatch(value)
    ):
        raise PydanticCustomError(
            "timestamp_number",
            "{value} is a number, not an ISO 8601 timestamp such as 2026-01-11T08:45:00-05:00",
            {"value": cut(str(value).strip(), 60)},
        )
    if type(value) is not str or not value[4:5].isdigit():  # the extended format (or no timestamp)
        return value
    basic = _BASIC.fullmatch(value)
    if basic is None:
        return value
    year, month, day, hour, minute, second, zone = basic.groups()
    if zone != "Z":
        zone = f"{zone[:3]}:{zone[-2:] if len(zone) > 3 else '00'}"
    return f"{year}-{month}-{day}T{hour}:{minute}:{(second or '00').replace(',', '.')}{zone}"


SignalTimestamp = Annotated[AwareDatetime, BeforeValidator(_extended)]
"""A :data:`Timestamp` an agent wrote: in ISO 8601's basic format too."""


Confidence = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
"""A confidence score on the protocol's 0-100 scale (a finding's true or false is refused where findings
are read: :mod:`agents.findings_parse`)."""


def _without_percent_sign(value: Any) -> Any:
    if isinstance(value, str) and value.rstrip().endswith("%"):
        return value.rstrip()[:-1].rstrip()
    if isinstance(value, bool):  # pydantic reads true and false as 1 and 0: a mistake here
        raise ValueError(f"a number, not {str(value).lower()}")
    return value


Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False), BeforeValidator(_without_percent_sign)]
"""A percentage from 0 to 100, written as a number or with its sign (``50%``)."""

_SEPARATORS: Final = re.compile(r"[\s_-]+")


def _spelling(value: str) -> str:
    """What a closed set's value is matched by: lower case, each run of separators one underscore."""
    return _SEPARATORS.sub("_", value.casefold()).strip("_")


class LenientEnum(StrEnum):
    """A closed set of text values that authors type by hand (the values of a signal's fields).

    A value matches a member's in any case and with spaces, hyphens and underscores alike (``SUCCESS``,
    ``can proceed parallel``, ``p1``), or when it is one of :meth:`aliases`; anything else is still
    refused, and pydantic's message lists the values. Pydantic asks :meth:`_missing_` only for a value
    that is not exactly a member's, so the usual case costs nothing.
    """

    @classmethod
    def aliases(cls) -> Mapping[str, Self]:
        """Other words for members (compared as values are); none unless a subclass names some."""
        return {}

    @classmethod
    def _missing_(cls, value: object) -> Self | None:
        if not isinstance(value, str):
            return None
        member = _spellings(cls).get(_spelling(value))
        return member if isinstance(member, cls) else None


@cache
def _spellings(enum: type[LenientEnum]) -> dict[str, LenientEnum]:
    """Each member by the spelling of its value and of its aliases."""
    found: dict[str, LenientEnum] = {_spelling(alias): member for alias, member in enum.aliases().items()}
    found.update((_spelling(member.value), member) for member in enum)
    return found


class Model(BaseModel):
    """Base of the closed wire models: unknown fields are an error, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)


class OpenModel(BaseModel):
    """Base of models whose source format lets authors add fields; extra fields are kept, not dropped.

    An extra field that is null is the same as no field: the wire form leaves out nulls (as it does for
    every optional field), so keeping one would make a decoded payload differ from its own round trip.
    """

    model_config = ConfigDict(extra="allow", frozen=True, coerce_numbers_to_str=True)

    @model_validator(mode="after")
    def _plain_extras(self) -> Self:
        extra = self.__pydantic_extra__
        if extra:
            for name, value in list(extra.items()):
                if value is None:
                    del extra[name]
                else:
                    extra[name] = _plain(value)
        return self


def _plain(value: Any) -> Any:
    """An extra field's value in JSON's types. A number whose ``str()`` is not its own (a YAML scalar
    that remembers how it was written, such as ``0755`` or ``1.10``) is that text, so nothing the author
    wrote is lost, and so is one JSON cannot carry (``nan``, ``inf``); any other number is a plain
    number."""
    kind = type(value)
    if kind is str or kind is int or kind is bool:
        return value
    if kind is float:  # JSON has no NaN or infinity: null on the wire, the field gone when read back
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        base = int if isinstance(value, int) else float
        text = str(value)
        return base(value) if text == base.__repr__(value) and math.isfinite(value) else text
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


M = TypeVar("M", bound=BaseModel)
# BaseModel's slots, set through their descriptors: what object.__setattr__ does, minus looking them up
# by name, which was a third of building a model on the coordinator's path.
_SLOTS: Final = vars(BaseModel)
_new: Final = object.__new__
_set_dict: Final = _SLOTS["__dict__"].__set__
_set_fields_set: Final = _SLOTS["__pydantic_fields_set__"].__set__
_set_extra: Final = _SLOTS["__pydantic_extra__"].__set__
_set_private: Final = _SLOTS["__pydantic_private__"].__set__


def trusted_instance(
    cls: type[M], data: dict[str, Any], fields_set: set[str], private: dict[str, Any] | None = None
) -> M:
    """What pydantic's construction leaves in an instance of a model without extra fields, built from
    values that are valid already (``data`` in field order, ``fields_set`` as validation would record
    it), without validating them again: for the hot paths that build models from validated parts.
    (Pydantic models have no ``__new__`` of their own: ``object.__new__`` makes the instance.)"""
    model: M = _new(cls)
    _set_dict(model, data)
    _set_fields_set(model, fields_set)
    _set_extra(model, None)
    _set_private(model, private)
    return model
