"""JSON Schemas of the envelope types, for consumers in other languages.

One schema per envelope type (the envelope with its ``type``, ``kind`` and ``payload`` pinned) is
generated from the pydantic models and shipped in ``bus/schemas/``; a test fails when the shipped
files drift from the models. ``subagent-bus schema [TYPE]`` prints them; ``--write`` regenerates them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import orjson

from bus.envelope import PAYLOADS, SCHEMA_VERSION, Envelope, EnvelopeType

__all__ = ["SCHEMA_DIR", "envelope_schema", "schema"]

SCHEMA_DIR = Path(__file__).parent / "schemas"


def envelope_schema(type_: EnvelopeType) -> dict[str, Any]:
    """The JSON Schema of an envelope of one type."""
    kind, model = PAYLOADS[type_]
    payload = model.model_json_schema(mode="serialization", ref_template="#/$defs/{model}")
    defs = payload.pop("$defs", {})
    base = Envelope.model_json_schema(mode="serialization")
    props = dict(base["properties"])
    props["kind"] = {"const": kind.value}
    props["type"] = {"const": type_.value}
    props["v"] = {"const": SCHEMA_VERSION}
    props["payload"] = payload
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:subagent-bus:v{SCHEMA_VERSION}:{type_.value}",  # absolute: resolvers need no base
        "title": f"{type_.value} envelope",
        "type": "object",
        "properties": props,
        "required": ["id", "kind", "type", "agent_id", "group_id", "ts", "payload"],
        "additionalProperties": False,
        "$defs": defs,
    }


def _render(type_: EnvelopeType) -> bytes:
    return orjson.dumps(envelope_schema(type_), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


@click.command()
@click.argument("type_name", metavar="[TYPE]", required=False)
@click.option("--write", is_flag=True, help="Regenerate the schema files shipped in the package.")
@click.option("--list", "list_types", is_flag=True, help="List the envelope types and their kinds.")
def schema(type_name: str | None, write: bool, list_types: bool) -> None:
    """Print the JSON Schema of an envelope type, or of all of them (TYPE: STOP_WORK, ...).

    Every stream entry but a dead letter is one field `data` holding JSON that matches one of these
    schemas (a signed human command has a second one, `sig`: see the README's "Security"). A dead letter's
    fields are reason, stream, entry_id, deliveries and the original entry's fields (`data`, others as
    `field:<name>`; `fields_dropped`, `data_bytes` and `fields_cut` when it was too big to keep whole).
    """
    if type_name is not None and (list_types or write):
        raise click.UsageError(
            f"TYPE {type_name!r} with --{'list' if list_types else 'write'}: give one or the other"
        )
    if list_types:
        for type_, (kind, _) in PAYLOADS.items():
            click.echo(f"{type_.value:24} {kind.value}")
        return
    if write:
        SCHEMA_DIR.mkdir(exist_ok=True)
        for type_ in EnvelopeType:
            (SCHEMA_DIR / f"{type_.value}.json").write_bytes(_render(type_))
        click.echo(f"wrote {len(EnvelopeType)} schemas to {SCHEMA_DIR}", err=True)
        return
    if type_name is None:
        everything = {t.value: envelope_schema(t) for t in EnvelopeType}
        click.echo(orjson.dumps(everything, option=orjson.OPT_INDENT_2).decode())
        return
    try:
        type_ = EnvelopeType(type_name.upper())
    except ValueError:
        known = ", ".join(t.value for t in EnvelopeType)
        raise click.BadParameter(f"unknown type {type_name!r}; one of: {known}", param_hint="TYPE") from None
    click.echo((SCHEMA_DIR / f"{type_.value}.json").read_text(), nl=False)
