"""Every command the README shows is a real command with real options; the quickstart is what CI runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from bus.cli import main

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def _command_lines() -> list[str]:
    lines = []
    for block in BLOCKS:
        for raw in block.splitlines():
            line = raw.split("  #", 1)[0].strip()
            for part in re.split(r"\s*&&\s*", line):
                if part.startswith("subagent-bus "):
                    lines.append(part)
    return lines


def test_quickstart_is_exactly_two_commands_and_ci_runs_the_second() -> None:
    quickstart = README.split("## Quickstart", 1)[1].split("##", 1)[0]
    [block] = re.findall(r"```sh\n(.*?)```", quickstart, flags=re.S)
    commands = [line for line in block.splitlines() if line.strip()]
    assert commands == ["pip install -e . && subagent-bus demo", "pip install -e '.[test]' && pytest"]
    assert "pip install -e '.[test]' && pytest" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("line", _command_lines())
def test_readme_command_parses(line: str) -> None:
    args = shlex.split(line.replace('"$(', '"').replace(')"', '"'))[1:]
    command: click.Command = main
    path = ["subagent-bus"]
    while isinstance(command, click.Group) and args and args[0] in command.commands:
        path.append(args[0])
        command = command.commands[args.pop(0)]
    assert len(path) > 1, f"not a subagent-bus command: {line}"
    if args and args[0] in ("-h", "--help"):
        return
    command.make_context(" ".join(path), args, resilient_parsing=False)
