"""Codex CLI's ``codex exec --json`` output: the agent's messages, read out of its event lines.

Each line is one JSON object whose ``type`` names an event: ``thread.started`` (its ``thread_id`` is the
session's id, which ``codex exec resume`` takes), ``turn.started``, ``turn.completed``, ``turn.failed``,
``error``, and ``item.started``, ``item.updated`` and ``item.completed``, each with an ``item``: its
``id``, its kind (in ``type``, or ``item_type`` in the first versions of the format) and its fields.
Only the text of a completed message item (``agent_message``, or ``assistant_message`` in the first
versions) is the agent's output. Reasoning, a command's output, a tool call's arguments and result, a
file change, a web search, a todo list and errors are not: a signal quoted there (a command that prints
the protocol, a plan that mentions it) is never taken for one, as a Claude Code transcript's tool results
are not (:mod:`agents.transcript`). An item is read once, when completed: the started and updated events
of the same item carry its text so far.

``turn.failed`` (its ``error``'s ``message`` says why: a usage limit, a model error) ends a turn that
failed: it is yielded as a :class:`~agents.items.TurnFailedItem`. An ``error`` event is not: Codex CLI
prints them for what it retries too (``Reconnecting... 1/5``), and one that ends the turn is followed by
its ``turn.failed``.

A message's text is placed as a Claude Code assistant text is: at the offset of its JSONL line, so that a
:class:`~agents.transcript.TranscriptParser` over this reader parses each message on its own and places
its items inside their line (ids stay deterministic, and a reading restarts at a line's start).
"""

from __future__ import annotations

from typing import Any, Final

from agents.jsonl_reader import JsonlReader, session_id_of

__all__ = ["CodexReader"]

_MESSAGES: Final = frozenset({"agent_message", "assistant_message"})
"""The item kinds whose text is the agent's own (``assistant_message`` in the first versions)."""


class CodexReader(JsonlReader):
    """Incremental reader of ``codex exec --json`` output yielding the agent's messages (and errors for
    malformed lines); :attr:`session_id` is the first ``thread.started`` event's ``thread_id``."""

    def _entry(self, entry: dict[str, Any], line: int, offset: int) -> None:
        kind = entry.get("type")
        if kind == "thread.started" and self.session_id is None:
            self.session_id = session_id_of(entry.get("thread_id"))
        if kind == "turn.failed":
            error = entry.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            said = message.strip() if isinstance(message, str) else ""
            self._failed(line, "Codex CLI reported turn.failed" + (f": {said}" if said else ""))
        if kind != "item.completed":
            return
        item = entry.get("item")
        if not isinstance(item, dict):
            self._error(line, offset, "item.completed without an item")
            return
        if not (_kind(item.get("type")) or _kind(item.get("item_type"))):
            return
        text = item.get("text")
        if not isinstance(text, str):
            self._error(line, offset, "agent message without text")
            return
        self._text(text, line, offset, offset)


def _kind(value: object) -> bool:
    """Whether an item's kind is a message's (a kind that is no string, a list say, is none)."""
    return isinstance(value, str) and value in _MESSAGES
