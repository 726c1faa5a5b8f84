"""The examples in the commands' --help name options those commands have."""

from __future__ import annotations

import shlex

import click
import pytest
from click.testing import CliRunner

from bus.cli import main

COMMANDS = [
    ["adapter", "run"],
    ["adapter", "watch"],
    ["launcher"],
    ["listen"],
    ["coordinator"],
    ["findings"],
]


def _command(path: list[str]) -> click.Command:
    command: click.Command = main
    with click.Context(main) as ctx:
        for name in path:
            assert isinstance(command, click.Group)
            found = command.get_command(ctx, name)
            assert found is not None, name
            command = found
    return command


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_each_example_runs_the_command_with_its_own_options(path: list[str]) -> None:
    shown = CliRunner().invoke(main, [*path, "--help"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    examples = [
        line.strip() for line in shown.output.splitlines() if line.strip().startswith("subagent-bus ")
    ]
    assert examples, f"no example in {' '.join(path)} --help"
    command = _command(path)
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for example in examples:
        words = shlex.split(example.replace("$(", "").replace(")", ""))
        assert words[1 : 1 + len(path)] == path, example
        own = words[1 + len(path) :]
        own = own[: own.index("--")] if "--" in own else own  # the agent's command line follows
        used = {word for word in own if word.startswith("--")}
        assert used <= known, f"{example}: {sorted(used - known)} unknown"
