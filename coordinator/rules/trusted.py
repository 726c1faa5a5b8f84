"""Building models from values that are already valid, without validating them again.

Inside the rules every value comes from a validated model (the decoded input envelope, the group state,
the policy) or is computed from such values, so validating again each emitted envelope, decision and
record only costs time. Validation stays at the edges: decoding an entry and loading a stored state.
The tests check that everything the rules build this way validates to the same value.

Only closed models (:class:`bus.fields.Model`: no extra fields) without private attributes are built
here; anything else falls back to pydantic's own constructors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from bus.fields import trusted_instance

__all__ = ["change", "compact", "construct", "evolve"]

M = TypeVar("M", bound=BaseModel)

_FieldSpec = tuple[str, Any, Callable[[], Any] | None]
_Spec = tuple[
    dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...], frozenset[str], tuple[_FieldSpec, ...]
]
"""Per model: every field with its default (None for one made by a factory), in declaration order; the
fields made by a factory; the fields without a default; and each field's name, default and factory."""
_SPECS: dict[type[BaseModel], _Spec] = {}
_PLAIN: dict[type[BaseModel], bool] = {}


def _plain(cls: type[BaseModel]) -> bool:
    """Whether a model of ``cls`` holds nothing but its fields: no extra fields, no private attributes.

    Asked of the class, not of the instance: each attribute of a pydantic model read on an instance
    costs about ten plain attribute reads (its class's ``__getattr__`` keeps CPython from caching the
    lookup), and the rules copy a model or two on every entry."""
    plain = _PLAIN.get(cls)
    if plain is None:
        plain = _PLAIN[cls] = cls.model_config.get("extra") != "allow" and not cls.__private_attributes__
    return plain


def _spec(cls: type[BaseModel]) -> _Spec:
    spec = _SPECS.get(cls)
    if spec is None:
        if not _plain(cls):
            raise TypeError(f"{cls.__name__} has extra fields or private attributes; validate it instead")
        fields: list[_FieldSpec] = []
        for name, info in cls.__pydantic_fields__.items():
            if info.default_factory_takes_validated_data:
                raise TypeError(f"{cls.__name__}.{name}: a default factory that reads other fields")
            fields.append((name, info.default, cast("Callable[[], Any] | None", info.default_factory)))
        template = {name: None if factory else default for name, default, factory in fields}
        factories = tuple((name, factory) for name, _, factory in fields if factory is not None)
        required = frozenset(
            name for name, default, factory in fields if factory is None and default is PydanticUndefined
        )
        spec = _SPECS[cls] = (template, factories, required, tuple(fields))
    return spec


def construct(cls: type[M], /, **values: Any) -> M:
    """A ``cls`` holding ``values`` (and the defaults of the fields not given), like ``cls(**values)``.

    Fields are stored in declaration order, so the model serializes exactly as a validated one.
    """
    template, factories, required, fields = _spec(cls)
    # A copy of every field's default, updated: a dict keeps the place of a key it had, so the fields
    # stay in declaration order, for less than building the dict field by field.
    data = template.copy()
    data.update(values)
    if len(data) != len(template) or not values.keys() >= required:
        data = _with_defaults(cls, fields, values)  # raises, naming the fields unknown or missing
    for name, factory in factories:
        if name not in values:
            data[name] = factory()
    return trusted_instance(cls, data, set(values))


def _with_defaults(
    cls: type[BaseModel], fields: tuple[_FieldSpec, ...], values: dict[str, Any]
) -> dict[str, Any]:
    data: dict[str, Any] = {}
    given = 0
    for name, default, factory in fields:
        if name in values:
            data[name] = values[name]
            given += 1
        elif factory is not None:
            data[name] = factory()
        elif default is PydanticUndefined:
            raise TypeError(f"{cls.__name__}: missing field {name!r}")
        else:
            data[name] = default
    if given != len(values):
        raise TypeError(f"{cls.__name__}: unknown fields {sorted(values.keys() - data.keys())}")
    return data


def evolve(model: M, /, **changes: Any) -> M:
    """``model.model_copy(update=changes)``, minus the generic work pydantic does for any model."""
    cls = type(model)
    if not _plain(cls):
        return model.model_copy(update=changes)
    data = model.__dict__.copy()
    data.update(changes)
    return trusted_instance(cls, data, model.__pydantic_fields_set__ | changes.keys())


def change(model: BaseModel, changes: dict[str, Any], /) -> None:
    """Change fields of ``model`` in place, as :func:`evolve` would in a copy. Only for a model its maker
    still holds alone (the records and states a run made for itself), which no one else sees change.
    (The changes come as a dict: the rules' hottest path has one at hand already.)"""
    model.__dict__.update(changes)
    model.__pydantic_fields_set__.update(changes)


_FIELDS_SETS: dict[frozenset[str], set[str]] = {}
"""One set per combination of fields given; a model has at most a few hundred (each field in or out)."""


def compact(model: M, /, **shared: Any) -> M:
    """``model`` as a state that keeps thousands of its kind holds it, e.g. finding reports.

    Each ``shared`` value that equals the model's own replaces it (a string other instances hold
    already, such as the file name of the other reports of a finding), and pydantic's record of the
    fields given (a set per instance, more than half of a small model's memory) is one set shared by
    every instance that gave the same fields. Sharing it is safe: the models are frozen, pydantic copies
    the set before it changes one (``model_copy``), and :func:`evolve` makes a new one.
    """
    cls = type(model)
    if not _plain(cls):
        return model
    data = model.__dict__.copy()
    for name, value in shared.items():
        if data[name] == value:
            data[name] = value
    given = frozenset(model.__pydantic_fields_set__)
    fields_set = _FIELDS_SETS.get(given)
    if fields_set is None:
        fields_set = _FIELDS_SETS[given] = set(given)
    return trusted_instance(cls, data, fields_set)
