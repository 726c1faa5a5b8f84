"""How group states are kept in Redis: field by field, written incrementally.

A group's state would grow with its agents, findings and idempotency window; rewriting all of it after
every batch would make each commit cost as much as the whole state. So a group is a hash
``{ns:s}:group:<gid>`` with one field per agent (``a:<id>``) and delegation (``d:<id>``) plus ``meta`` for
the rest; its merged findings are a hash ``{ns:s}:merged:<gid>`` of one field per slot, and its window of
applied envelope ids is a list ``{ns:s}:seen:<gid>`` that is appended to and trimmed. The rules return new
immutable records only for what they changed, so comparing records by identity tells which fields to
write.

The merged findings have their own hash because they are what grows (a group of a few agents can merge
hundreds of thousands of findings): ``status``, ``inbox`` and the human commands read the group hash
alone, in one command, and only count the slots. Slots stored by 0.1.0 in the group hash (``f:<key>``)
are still read; a slot written since, in the merged hash, takes their place.

``{ns:s}:groups`` is the set of the shard's group ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from itertools import compress
from operator import is_not
from typing import Any, NamedTuple

import orjson
from pydantic import BaseModel, ValidationError

from bus.connection import as_text
from bus.envelope import first_errors
from bus.errors import DecodeError
from bus.fields import Model
from bus.keys import AGENT_FIELD, Keys
from coordinator.commit import Commit
from coordinator.rules.findings import compact_slot, fold
from coordinator.state import AgentRecord, Delegation, FindingSlot, GroupState, IdWindow

__all__ = [
    "Touched",
    "decode_slots",
    "delete_group",
    "legacy_slots",
    "load_state",
    "merged_key",
    "stored_text",
    "write_changes",
]

_MAPS: dict[str, tuple[str, type[AgentRecord] | type[Delegation]]] = {
    "agents": (AGENT_FIELD, AgentRecord),
    "delegations": ("d:", Delegation),
}
_LEGACY_SLOT = "f:"
_META_EXCLUDE = {*_MAPS, "findings", "window"}
_CONFLICTS = "severity_conflicts"
"""The meta field counting the merged findings in conflict: left out when 0, and missing from states
stored before it was kept (loaded with their findings, they are counted then)."""


def group_key(keys: Keys, shard: int, group_id: str) -> str:
    return keys.group(shard, group_id)


def seen_key(keys: Keys, shard: int, group_id: str) -> str:
    return keys.state(shard, f"seen:{group_id}")


def merged_key(keys: Keys, shard: int, group_id: str) -> str:
    return keys.state(shard, f"merged:{group_id}")


def _meta(state: GroupState) -> bytes:
    return state.__pydantic_serializer__.to_json(state, exclude=_META_EXCLUDE, exclude_defaults=True)


def _json(record: BaseModel) -> bytes:
    """A record's stored JSON: every field, as validation reads it back into an equal record.

    orjson writes it from the record's own values (:func:`_fields`) in half of pydantic's time or less,
    which is most of a batch's writes; whatever orjson refuses (an integer beyond 64 bits in the extra
    fields of an agent's signal) is written by pydantic.
    """
    try:
        return orjson.dumps(record, default=_fields, option=orjson.OPT_UTC_Z)
    except orjson.JSONEncodeError:
        return record.__pydantic_serializer__.to_json(record, exclude_defaults=True)


def _fields(value: Any) -> dict[str, Any]:
    """A model's fields and extra fields, for orjson (called for values it cannot write itself)."""
    if isinstance(value, Model):  # closed: no extra fields (one attribute read less, per record)
        return value.__dict__
    if not isinstance(value, BaseModel):
        raise TypeError(f"{type(value).__name__} is not JSON")
    extra = value.__pydantic_extra__
    return {**value.__dict__, **extra} if extra else value.__dict__


class Touched(NamedTuple):
    """The agent and finding ids whose records may differ between two states."""

    agents: AbstractSet[str]
    findings: AbstractSet[str]


def write_changes(
    commit: Commit,
    keys: Keys,
    shard: int,
    old: GroupState | None,
    new: GroupState,
    limit: int,
    touched: Touched,
) -> None:
    """Add to ``commit`` the writes that turn the stored ``old`` state into ``new``.

    Only the ``touched`` agent and finding records are compared (every record of a group not stored
    before): a group's findings grow into the thousands, and a batch of one entry should not cost a
    walk over all of them.
    """
    key = group_key(keys, shard, new.group_id)
    if old is None:
        commit.sadd(keys.groups(shard), new.group_id)
    if old is None or old.applied != new.applied or _meta(old) != _meta(new):
        commit.hset(key, "meta", _meta(new))
    for name, (prefix, _) in _MAPS.items():
        before: dict[str, Any] = getattr(old, name) if old else {}
        after: dict[str, Any] = getattr(new, name)
        if after is not before:
            _write_map(
                commit, key, prefix, before, after, touched.agents if old and name == "agents" else None
            )
    if old is None or new.findings is not old.findings:
        slots = merged_key(keys, shard, new.group_id)
        _write_map(
            commit, slots, "", old.findings if old else {}, new.findings, touched.findings if old else None
        )
    added = _appended(old.window if old else IdWindow(), new.window)
    if added:
        commit.rpush_trim(seen_key(keys, shard, new.group_id), added, limit)


def delete_group(commit: Commit, keys: Keys, shard: int, group_id: str) -> None:
    """Add to ``commit`` the deletion of a retired group's stored state."""
    commit.srem(keys.groups(shard), group_id)
    for key in (group_key, merged_key, seen_key):
        commit.delete(key(keys, shard, group_id))


def _write_map(
    commit: Commit,
    key: str,
    prefix: str,
    before: dict[str, Any],
    after: dict[str, Any],
    only: AbstractSet[str] | None = None,
) -> None:
    """The fields of one map (agents, delegations, findings) whose records are not the same objects."""
    if only is not None:  # the ids that may have changed are known
        for item_id in sorted(only):
            record = after.get(item_id)
            if record is None:
                if item_id in before:
                    commit.hdel(key, prefix + item_id)
            elif record is not before.get(item_id):
                commit.hset(key, prefix + item_id, _json(record))
        return
    # the rules replace only what changed: compare identities, record by record, without a Python loop
    changed = list(compress(after, map(is_not, map(before.get, after), after.values())))
    for item_id in changed:
        commit.hset(key, prefix + item_id, _json(after[item_id]))
    new_ids = sum(item_id not in before for item_id in changed)
    if len(after) - new_ids != len(before):  # some ids are gone
        for item_id in before.keys() - after.keys():
            commit.hdel(key, prefix + item_id)


def _appended(old: IdWindow, new: IdWindow) -> list[str]:
    """The ids ``new`` holds after the newest id of ``old`` (windows only ever append)."""
    last = old.chunks[-1][-1] if old.chunks else None
    out: list[str] = []
    for chunk in reversed(new.chunks):
        for envelope_id in reversed(chunk):
            if envelope_id == last:
                return out[::-1]
            out.append(envelope_id)
    return out[::-1]


def stored_text(raw: bytes | str, where: str) -> str:
    """A name the coordinators stored (a group id, a slot's key), as text; a :class:`DecodeError` naming
    ``where`` when it is not UTF-8 (written by hand or damaged), rather than a traceback that stops every
    shard of the process."""
    try:
        return as_text(raw)
    except UnicodeDecodeError:
        raise DecodeError(
            f"{where} holds {raw!r:.80}, not UTF-8 text: the shard's state is damaged"
        ) from None


def decode_slots(raw: Mapping[Any, Any], where: str = "a merged hash") -> dict[str, FindingSlot]:
    """Merged-finding slots from fields of a group's merged hash; :class:`DecodeError` if corrupt."""
    slots: dict[str, FindingSlot] = {}
    for k, v in raw.items():
        key = stored_text(k, where)
        try:
            slots[key] = compact_slot(FindingSlot.model_validate_json(v))
        except (ValidationError, UnicodeDecodeError) as exc:
            raise DecodeError(f"invalid stored merged finding {key!r}: {_problem(exc)}") from None
    return slots


def legacy_slots(fields: Mapping[Any, Any]) -> dict[str, Any]:
    """The slots 0.1.0 kept in the group hash (``f:<key>``), by key, undecoded."""
    return {name[2:]: value for name, value in _text_keys(fields).items() if name.startswith(_LEGACY_SLOT)}


def _text_keys(fields: Mapping[Any, Any]) -> dict[str, Any]:
    return {as_text(name): value for name, value in fields.items()}


def _with_legacy(legacy: dict[str, FindingSlot], slots: Mapping[str, FindingSlot]) -> dict[str, FindingSlot]:
    """0.1.0's slots with the merged hash's: a slot in both (coordinators of both versions applied reports
    to it, during an upgrade) holds the reports of both, as :func:`fold` keeps them."""
    found = dict(legacy)
    for key, new in slots.items():
        old, both = found.get(key), new
        for report in old.reports.values() if old is not None else ():
            both = fold(both, report)
        found[key] = both
    return found


def load_state(
    group_id: str, fields: Mapping[Any, Any], seen: list[Any], slots: Mapping[str, FindingSlot] | None = None
) -> GroupState:
    """A group's state from its hash fields, its window list and its merged-finding slots (None leaves
    them out); :class:`DecodeError` if corrupt."""
    try:
        fields = _text_keys(fields)
        data: dict[str, Any] = orjson.loads(fields.get("meta", b"{}"))
        data["group_id"] = group_id
        maps: dict[str, dict[str, Any]] = {name: {} for name in _MAPS}
        for name, value in fields.items():
            for attr, (prefix, model) in _MAPS.items():
                if name.startswith(prefix):
                    maps[attr][name[len(prefix) :]] = _field(group_id, name, model, value)
        legacy = legacy_slots(fields)
        counted: Mapping[str, FindingSlot] | None = None  # the slots to count conflicts in, if need be
        if slots is not None:
            counted = maps["findings"] = _with_legacy(decode_slots(legacy), slots) if legacy else dict(slots)
        elif legacy:  # a view of a state 0.1.0 stored (its slots are few next to a new layout's)
            counted = decode_slots(legacy)
        if _CONFLICTS not in data and counted is not None:  # stored before the count was kept
            data[_CONFLICTS] = sum(slot.conflict_reported for slot in counted.values())
        ids = [as_text(s) for s in seen]
        chunk = IdWindow.CHUNK
        window = IdWindow.model_construct(
            chunks=tuple(tuple(ids[i : i + chunk]) for i in range(0, len(ids), chunk))
        )
        return GroupState.model_validate({**data, **maps, "window": window})
    except (orjson.JSONDecodeError, ValidationError, UnicodeDecodeError) as exc:
        raise DecodeError(f"invalid stored state of group {group_id}: {_problem(exc)}") from None


def _field(
    group_id: str, name: str, model: type[AgentRecord] | type[Delegation], value: Any
) -> AgentRecord | Delegation:
    """The record a field of a group's hash holds; :class:`DecodeError`, naming the field, if corrupt."""
    try:
        return model.model_validate_json(value)
    except ValidationError as exc:
        raise DecodeError(
            f"invalid stored state of group {group_id}, field {name!r}: {_problem(exc)}"
        ) from None


def _problem(exc: Exception) -> str:
    """What is wrong with a stored value, on one line."""
    if isinstance(exc, ValidationError):
        return first_errors(exc, exc.title, named=True)
    return " ".join(str(exc).split())
