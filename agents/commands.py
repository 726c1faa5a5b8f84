"""Every command of the agent side, for the ``subagent_bus.commands`` entry point."""

from __future__ import annotations

import click

from agents.cli import commands as parse_commands

__all__ = ["commands"]

commands: list[click.Command] = [*parse_commands]
