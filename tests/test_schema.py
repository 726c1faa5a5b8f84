"""The shipped JSON Schemas match the models and validate real envelopes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import orjson
import pytest
from click.testing import CliRunner
from referencing import Registry, Resource

from bus.cli import main
from bus.envelope import PAYLOADS, EnvelopeType, decode, encode, new_envelope
from bus.errors import DecodeError
from bus.schema import SCHEMA_DIR, _render
from bus.signals import Progress, StopWork


@pytest.mark.parametrize("type_", list(EnvelopeType))
def test_shipped_schema_matches_the_models(type_: EnvelopeType) -> None:
    shipped = (SCHEMA_DIR / f"{type_.value}.json").read_bytes()
    assert shipped == _render(type_), f"run `subagent-bus schema --write`: {type_.value} drifted"


def test_schema_validates_an_encoded_envelope_and_rejects_a_wrong_one() -> None:
    envelope = new_envelope(Progress(agent_id="a1", percent=40, message="half"), agent_id="a1", group_id="g")
    data = orjson.loads(encode(envelope))
    schema = orjson.loads((SCHEMA_DIR / "PROGRESS.json").read_bytes())
    jsonschema.validate(data, schema)
    data["payload"]["percent"] = 140
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


def test_the_schemas_are_found_by_their_absolute_ids_from_one_schema_of_any_envelope() -> None:
    schemas = [orjson.loads(path.read_bytes()) for path in sorted(SCHEMA_DIR.glob("*.json"))]
    registry: Registry[Any] = Registry().with_resources(
        (schema["$id"], Resource.from_contents(schema)) for schema in schemas
    )
    assert all(schema["$id"].startswith("urn:subagent-bus:v1:") for schema in schemas)
    any_envelope = {"oneOf": [{"$ref": schema["$id"]} for schema in schemas]}
    validator = jsonschema.Draft202012Validator(any_envelope, registry=registry)
    envelope = new_envelope(Progress(agent_id="a1", percent=40, message="half"), agent_id="a1", group_id="g")
    data = orjson.loads(encode(envelope))
    validator.validate(data)
    data["type"] = "STOP_WORK"
    assert not validator.is_valid(data)


@pytest.mark.parametrize("details", ["", "  \n\t"])
def test_the_schema_refuses_a_blank_required_text_as_the_coordinator_does(details: str) -> None:
    stop = StopWork(agent_id="a1", stop_reason="blocker", blocker_type="missing_info", details="the key")
    data = orjson.loads(encode(new_envelope(stop, agent_id="a1", group_id="g")))
    schema = orjson.loads((SCHEMA_DIR / "STOP_WORK.json").read_bytes())
    jsonschema.validate(data, schema)
    data["payload"]["details"] = details
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


@pytest.mark.parametrize(
    ("stop_reason", "blocker_type", "valid"),
    [
        ("blocker", None, False),
        ("blocker", "null", False),
        ("blocker", "missing_info", True),
        ("error", None, True),
        ("completion", None, True),
    ],
)
def test_the_schema_and_the_decoder_agree_on_a_stop_without_blocker_type(
    stop_reason: str, blocker_type: str | None, valid: bool
) -> None:
    payload: dict[str, object] = {"agent_id": "a1", "stop_reason": stop_reason, "details": "the key"}
    if blocker_type is not None:
        payload["blocker_type"] = None if blocker_type == "null" else blocker_type
    data = {
        "id": "e1",
        "kind": "signal",
        "type": "STOP_WORK",
        "agent_id": "a1",
        "group_id": "g",
        "ts": "2026-01-11T10:00:00Z",
        "payload": payload,
    }
    schema = orjson.loads((SCHEMA_DIR / "STOP_WORK.json").read_bytes())
    if valid:
        jsonschema.validate(data, schema)
        decode(orjson.dumps(data))
        return
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)
    with pytest.raises(DecodeError, match="blocker_type is required"):
        decode(orjson.dumps(data))


def test_schema_command_prints_one_type_and_rejects_unknown() -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["schema", "stop_work"])
    assert ok.exit_code == 0
    assert orjson.loads(ok.output)["properties"]["type"] == {"const": "STOP_WORK"}
    bad = runner.invoke(main, ["schema", "NOPE"])
    assert bad.exit_code == 2
    assert "unknown type" in bad.output
    for flag in ("--list", "--write"):  # each would leave TYPE out without a word
        both = runner.invoke(main, ["schema", "STOP_WORK", flag])
        assert both.exit_code == 2 and f"TYPE 'STOP_WORK' with {flag}: give one or the other" in both.output


def test_schema_command_lists_prints_all_and_writes_the_shipped_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    listed = runner.invoke(main, ["schema", "--list"])
    assert listed.exit_code == 0
    rows = dict(line.split() for line in listed.output.splitlines())
    assert rows == {t.value: kind.value for t, (kind, _) in PAYLOADS.items()}
    everything = runner.invoke(main, ["schema"])
    assert everything.exit_code == 0
    assert orjson.loads(everything.output) == {
        t.value: orjson.loads((SCHEMA_DIR / f"{t.value}.json").read_bytes()) for t in EnvelopeType
    }
    monkeypatch.setattr("bus.schema.SCHEMA_DIR", tmp_path / "schemas")
    written = runner.invoke(main, ["schema", "--write"])
    assert written.exit_code == 0
    assert f"wrote {len(EnvelopeType)} schemas" in written.stderr
    for type_ in EnvelopeType:
        name = f"{type_.value}.json"
        assert (tmp_path / "schemas" / name).read_bytes() == (SCHEMA_DIR / name).read_bytes()


def test_schema_help_does_not_claim_dead_letters_are_envelopes() -> None:
    help_text = " ".join(CliRunner().invoke(main, ["schema", "--help"]).output.split())
    assert "Every stream entry but a dead letter" in help_text
