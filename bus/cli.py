"""The ``subagent-bus`` command: a thin click group.

``bus`` imports neither ``agents`` nor ``coordinator``; their commands join this group through the
``subagent_bus.commands`` entry-point group (each entry point names a list of click commands).
Environment variables are read here and only here (click ``envvar=``).
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from typing import Final

import click

from bus.acl import acl
from bus.cli_connection import down
from bus.entry import EXIT_INTERRUPTED
from bus.human_key import KEY_FILE_ENV
from bus.params import utf8
from bus.retention import trim_command
from bus.schema import schema
from bus.tail_cli import tail

__all__ = ["EXIT_INTERRUPTED", "main"]

ENV_PREFIX: Final = "SUBAGENT_BUS_"
"""The options' environment variables' names start with it."""
_PATHS: Final = frozenset({KEY_FILE_ENV, "SUBAGENT_BUS_POLICY"})
"""The variables that name files: a path may hold any bytes, and is opened as it is."""


class _Root(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # An argument that is not UTF-8 reaches Python with surrogates in place of its bad bytes, and
        # would fail wherever it is first encoded (a key, a JSON document): refuse it here, by name.
        for arg in args:
            if not utf8(arg):
                raise click.UsageError(f"argument '{_shown(arg)}' is not valid UTF-8", ctx) from None
        for name, value in os.environ.items():  # the same of the options' environment variables
            if name.startswith(ENV_PREFIX) and name not in _PATHS and not utf8(value):
                raise click.UsageError(f"${name} ('{_shown(value)}') is not valid UTF-8", ctx)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        # Ctrl-C exits 128 + SIGINT, as shells and other tools do, not click's "Aborted!" and 1. Commands
        # that stop gracefully on SIGINT (coordinator, launcher, adapters) install their own handlers.
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            pass
        except click.Abort as exc:  # a prompt interrupted; an Abort for end of input stays an error
            if not isinstance(exc.__context__, KeyboardInterrupt):
                raise
        click.echo(err=True)  # ends the line of the terminal's ^C
        ctx.exit(EXIT_INTERRUPTED)


def _shown(text: str) -> str:
    """Text read with surrogates in place of its bad bytes, those bytes as ``\\xff``."""
    return text.encode(errors="surrogateescape").decode(errors="backslashreplace")


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="subagent-bus")
def main() -> None:
    """Coordinate AI subagents over Redis Streams.

    Adapters parse agent output into typed envelopes; coordinators apply the protocol's rules exactly
    once; findings go to an append-only stream. Without --redis-url a local Redis is started for you.
    """


main.add_command(schema)
main.add_command(tail)
main.add_command(acl)
main.add_command(down)
main.add_command(trim_command)


def _load_plugins() -> None:
    for ep in entry_points(group="subagent_bus.commands"):
        for command in ep.load():
            existing = main.commands.get(command.name or "")
            if isinstance(existing, click.Group) and isinstance(command, click.Group):
                # Two packages contribute to one group (e.g. `findings`: the coordinator's views and the
                # agent side's `findings add`): keep the group with options, give it the other's subcommands.
                keep, other = (
                    (command, existing) if len(command.params) > len(existing.params) else (existing, command)
                )
                for sub in other.commands.values():
                    keep.add_command(sub)
                main.add_command(keep)
            else:
                main.add_command(command)


_load_plugins()
