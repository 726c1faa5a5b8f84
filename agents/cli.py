"""Commands of the agent side: parsing agent output (adapters and launcher join later)."""

from __future__ import annotations

import click

__all__ = ["commands"]

commands: list[click.Command] = []
