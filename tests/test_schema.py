"""The shipped JSON Schemas match the models and validate real envelopes."""

from __future__ import annotations

import jsonschema  # type: ignore[import-untyped]
import orjson
import pytest
from click.testing import CliRunner

from bus.cli import main
from bus.envelope import EnvelopeType, encode, new_envelope
from bus.schema import SCHEMA_DIR, _render
from bus.signals import Progress


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


def test_schema_command_prints_one_type_and_rejects_unknown() -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["schema", "stop_work"])
    assert ok.exit_code == 0
    assert orjson.loads(ok.output)["properties"]["type"] == {"const": "STOP_WORK"}
    bad = runner.invoke(main, ["schema", "NOPE"])
    assert bad.exit_code == 2
    assert "unknown type" in bad.output
