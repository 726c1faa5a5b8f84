"""Commands of the coordinator side."""

from __future__ import annotations

import click

__all__ = ["commands"]

commands: list[click.Command] = []
