"""compose.yaml is valid and every service runs a real command with real options and env vars."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from bus.cli import main

COMPOSE = Path(__file__).parent.parent / "compose.yaml"


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def _resolve(args: list[str]) -> tuple[click.Command, list[str], list[str]]:
    command: click.Command = main
    path = []
    rest = list(args)
    while isinstance(command, click.Group) and rest and rest[0] in command.commands:
        path.append(rest[0])
        command = command.commands[rest.pop(0)]
    return command, path, rest


def _envvars(command: click.Command) -> set[str]:
    found = {p.envvar for p in command.params if isinstance(p.envvar, str)}
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            found |= _envvars(sub)
    return found


def test_redis_keeps_an_append_only_file_and_needs_a_password() -> None:
    redis = _compose()["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert "--requirepass" in command


def test_two_coordinator_replicas_and_a_launcher_and_an_adapter() -> None:
    services = _compose()["services"]
    assert services["coordinator"]["deploy"]["replicas"] == 2
    assert {"launcher", "adapter"} <= set(services)


@pytest.mark.parametrize("service", ["coordinator", "launcher", "adapter"])
def test_service_runs_a_real_command_with_real_options(service: str) -> None:
    spec = _compose()["services"][service]
    command, path, rest = _resolve(spec["command"])
    assert path, f"{service}: {spec['command'][0]!r} is not a subagent-bus command"
    ctx = command.make_context(" ".join(["subagent-bus", *path]), rest, resilient_parsing=False)
    assert ctx.params  # parsed without error: every option exists and takes what is given
    known = _envvars(main)
    for name in spec["environment"]:
        assert name in known, f"{service}: {name} is read by no command"


def test_no_default_of_a_variable_holds_a_brace() -> None:
    # compose ends `${VAR:-default}` at the first "}": `${VAR:-echo {prompt}}` leaves a "}" behind a value
    for default in re.findall(r"\$\{[A-Z_]+:?[-?]([^}]*)\}", COMPOSE.read_text()):
        assert "{" not in default, default
