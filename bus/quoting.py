"""Quoting what someone else wrote in a message: cut short, since an agent's field or a key in a file may
be a megabyte, and a message that repeats it all says no more. (A base module: the models use it.)"""

from __future__ import annotations

__all__ = ["cut", "quoted"]


def cut(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when anything was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quoted(text: str, limit: int = 60) -> str:
    r"""``'text'`` for a message, cut to ``limit`` characters, each character that is not printable escaped
    as Python writes it (``\n``, ``\x1b``): a line break or a terminal's escape sequence in a key would
    otherwise reach the terminal, or forge a line of a log. A backslash stays one (``src\a.ts``)."""
    shown = cut(text, limit)
    if not shown.isprintable():
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in shown)
    return f"'{shown}'"
