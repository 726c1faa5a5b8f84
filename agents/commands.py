"""Every command of the agent side, for the ``subagent_bus.commands`` entry point."""

from __future__ import annotations

import click

from agents.adapter_cli import commands as adapter_commands
from agents.agent_commands import commands as turn_commands
from agents.cli import commands as parse_commands
from agents.findings_add import add
from agents.launcher_cli import launcher

__all__ = ["commands"]


@click.group("findings")
def findings() -> None:
    """Findings: the agent side contributes `findings add`; the CLI root merges it with the views."""


findings.add_command(add)

commands: list[click.Command] = [*parse_commands, *adapter_commands, launcher, *turn_commands, findings]
"""Commands of the agent side: parsing agent output, adapters, the prompt, the launcher, the turn-based
commands (listen, mcp, init) and `findings add`."""
