"""Click parameter types and checks shared by the commands."""

from __future__ import annotations

import math
from typing import Any, Final

import click
from click.core import ParameterSource

from bus.display import has_control
from bus.envelope import MAX_NAME_CHARS

__all__ = [
    "COUNT",
    "MILLISECONDS",
    "EnvOption",
    "FiniteFloatRange",
    "an_id",
    "not_blank",
    "process_name",
    "utf8",
]


MAX_SECONDS: Final = 1e9
"""About 31 years: the longest count of seconds an option takes (``1e308`` overflows a timer)."""


COUNT: Final = click.IntRange(0, 2**63 - 1)
"""A count of entries that a Redis command takes (a larger one it refuses as no integer)."""
MILLISECONDS: Final = click.IntRange(1, int(MAX_SECONDS * 1000))
"""Milliseconds, at most :data:`MAX_SECONDS` (a Redis command and a timer take them)."""


class EnvOption(click.Option):
    """An option also read from an environment variable, which its help names (``show_envvar``, unless told
    otherwise): an error about a value given on the command line names the option alone, not the variable,
    which the user may never have set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("show_envvar", True)
        super().__init__(*args, **kwargs)

    def get_error_hint(self, ctx: click.Context | None) -> str:
        if (
            ctx is not None
            and self.name
            and ctx.get_parameter_source(self.name) is ParameterSource.COMMANDLINE
        ):
            return click.Parameter.get_error_hint(self, ctx)
        return super().get_error_hint(ctx)


class FiniteFloatRange(click.FloatRange):
    """A ``click.FloatRange`` of seconds that refuses ``nan`` and ``inf``, which Python's ``float()``
    accepts and which no count of seconds can be (``nan`` also slips through every range check), and
    counts over :data:`MAX_SECONDS`."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The number, or a usage error for one that is not finite or out of the range."""
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if number > MAX_SECONDS:
            self.fail(f"{value!r} is more than {MAX_SECONDS:g} seconds", param, ctx)
        return number


def not_blank(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: a text option given as "" or spaces (an unset shell variable, say) is a
    mistake, not a value."""
    if value is not None and not value.strip():
        raise click.BadParameter("must not be blank")
    return value


def an_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: an agent or group id to look for is not blank, and no longer than an envelope's
    (a longer one names nothing, and the message saying so would repeat it whole)."""
    value = not_blank(ctx, param, value)
    if value is not None and len(value) > MAX_NAME_CHARS:
        raise click.BadParameter(
            f"is {len(value):,} characters long: no agent or group id has more than {MAX_NAME_CHARS}"
        )
    return value


def process_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: a process's name (``--name``, its consumer name) is neither blank nor holds a
    control character: it goes into log lines and the server's consumer lists."""
    value = not_blank(ctx, param, value)
    if value is not None and has_control(value):
        raise click.BadParameter("must not contain control characters (a newline, a tab...)")
    return value


def utf8(text: str) -> bool:
    """Whether ``text`` came from valid UTF-8: Python reads an argument's or environment variable's bad
    bytes as surrogates, which fail wherever the text is first encoded (a key, a password, JSON)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
