"""A YAML loader for the bodies of signal blocks, safe against hostile input.

Signal bodies are hand-written YAML coming from a program we do not control, so the loader:

- builds only plain data (str, int, float, bool, None, list, dict); any tag other than the standard
  scalar/collection tags is an error, and nothing is ever instantiated from a tag;
- follows the YAML 1.2 core schema for plain scalars: only ``true``/``false`` are booleans (``yes``,
  ``no``, ``on``, ``off`` stay strings), ``0o17``/``0x1f`` are integers, ``1:30`` is a string, and
  timestamps are never converted: they stay strings, so the payload models validate ISO-8601 and reject
  a timestamp without a time zone;
- allows aliases (anchors are legitimate YAML) but at most ``max_aliases`` of them, and bounds what they
  expand to: every alias adds the full size of its target (one per node plus the length of each scalar)
  to a budget of ``max_alias_expansion``, and the nesting depth is checked with the alias's target
  expanded. A "billion laughs" document is therefore rejected after a few dozen events, and a recursive
  alias (an anchor used inside itself) is rejected outright;
- rejects nesting deeper than ``max_depth`` collections and duplicate mapping keys.

The event stream comes from libyaml when PyYAML was built with it, else from PyYAML's pure-Python
parser; composition and construction are done here in one pass. The usual shapes of a signal body
(``key: value`` lines, ``key: |`` blocks, simple lists) are read without it, by
:func:`agents.yamlfast.read`, to the same result.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, cast

import yaml
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)

from agents import yamlfast
from agents.yamlfast import Value
from agents.yamlfast import plain as _plain
from agents.yamlfast import resolve as _resolve
from bus.display import cut, quoted
from bus.errors import ProtocolError

__all__ = [
    "DEFAULT_MAX_ALIASES",
    "DEFAULT_MAX_ALIAS_EXPANSION",
    "DEFAULT_MAX_DEPTH",
    "YamlError",
    "load",
    "load_events",
]

DEFAULT_MAX_ALIASES: Final = 50
DEFAULT_MAX_DEPTH: Final = 32
DEFAULT_MAX_ALIAS_EXPANSION: Final = 1 << 20

_LOADER: Final = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
_TAG: Final = "tag:yaml.org,2002:"
_SCALAR_TAGS: Final[dict[str | None, type]] = {"int": int, "float": float, "bool": bool, "null": type(None)}

_Next = Callable[[], Event]


class YamlError(ProtocolError):
    """The body is not acceptable YAML; ``line`` is 1-based within the loaded text when known."""

    def __init__(
        self, message: str, line: int | None = None, *, within: tuple[str, int] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.within = within
        """What the parser was reading when it met the problem, and its 1-based line, when that is
        another line: ``("while scanning a quoted scalar", 7)`` for a quote never closed."""

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line is not None else self.message


def load(
    text: str,
    *,
    max_aliases: int = DEFAULT_MAX_ALIASES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_alias_expansion: int = DEFAULT_MAX_ALIAS_EXPANSION,
) -> Value:
    """Load one YAML document; an empty document is ``None``. Raises :class:`YamlError`."""
    simple = yamlfast.read(text, max_depth)
    if simple is not None:
        return simple
    return load_events(
        text, max_aliases=max_aliases, max_depth=max_depth, max_alias_expansion=max_alias_expansion
    )


def load_events(
    text: str,
    *,
    max_aliases: int = DEFAULT_MAX_ALIASES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_alias_expansion: int = DEFAULT_MAX_ALIAS_EXPANSION,
) -> Value:
    """:func:`load` without the fast path: always through the YAML event stream."""
    builder = _Builder(max_aliases, max_depth, max_alias_expansion)
    loader = _LOADER(text)
    try:
        return builder.document(cast(_Next, loader.peek_event), cast(_Next, loader.get_event))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        context = exc.context_mark
        within = (
            (exc.context, context.line + 1)
            if exc.problem
            and exc.context
            and context is not None
            and mark is not None
            and context.line != mark.line
            else None
        )
        raise YamlError(problem, mark.line + 1 if mark is not None else None, within=within) from None
    except yaml.reader.ReaderError as exc:  # a control character; carries a position, not a mark
        character = exc.character if isinstance(exc.character, str) else chr(exc.character)
        line = text.count("\n", 0, exc.position) + 1
        raise YamlError(f"unacceptable character U+{ord(character):04X}: {exc.reason}", line) from None
    except yaml.YAMLError as exc:
        raise YamlError(str(exc).replace("\n", " ")) from None
    finally:
        loader.dispose()


def _tagged(tag: str, value: str, line: int) -> Value:
    """A scalar with an explicit standard tag (``!!str 12``, ``!!int "3"``...)."""
    name = tag.removeprefix(_TAG) if tag.startswith(_TAG) else None
    if name == "str":
        return value
    if name not in _SCALAR_TAGS:
        raise YamlError(f"unsupported tag {quoted(tag)}", line)
    resolved = _resolve(value)  # the tag asked for a number: no text to keep
    if name == "float" and isinstance(resolved, int) and not isinstance(resolved, bool):
        resolved = float(resolved)
    if type(resolved) is not _SCALAR_TAGS[name]:
        raise YamlError(f"{cut(repr(value), 60)} is not a valid {tag!r}", line)
    if isinstance(resolved, float) and not math.isfinite(resolved):
        return value  # as an untagged one is: JSON has no NaN or infinity, and would carry it as null
    return resolved


class _Builder:
    """Composes and constructs in one pass over the event stream, enforcing the limits."""

    def __init__(self, max_aliases: int, max_depth: int, max_alias_expansion: int) -> None:
        self._max_aliases = max_aliases
        self._max_depth = max_depth
        self._max_expansion = max_alias_expansion
        self._aliases = 0
        self._expansion = 0
        self._weight = 0  # nodes built so far, aliases counted expanded
        self._depth = 0
        # anchor -> (value, expanded weight, height); only complete nodes, so recursion is refused
        self._anchors: dict[str, tuple[Value, int, int]] = {}
        self._peek: _Next = _no_event
        self._take: _Next = _no_event

    def document(self, peek: _Next, take: _Next) -> Value:
        """Build the single document of an event stream (``peek``/``take`` the next event)."""
        self._peek, self._take = peek, take
        self._expect(StreamStartEvent)
        if isinstance(self._peek(), StreamEndEvent):
            return None
        self._expect(DocumentStartEvent)
        value, _ = self._node()
        self._expect(DocumentEndEvent)
        event = self._take()
        if not isinstance(event, StreamEndEvent):
            raise YamlError("expected a single document, found another one", _line(event))
        return value

    def _expect(self, kind: type[Event]) -> Event:
        event = self._take()
        if not isinstance(event, kind):
            raise YamlError(f"unexpected {type(event).__name__}", _line(event))
        return event

    def _node(self) -> tuple[Value, int]:
        """The next node's value and its height (0 for a scalar)."""
        event = self._take()
        if isinstance(event, AliasEvent):
            return self._alias(event)
        start = self._weight
        anchor: str | None = event.anchor  # type: ignore[attr-defined]
        if isinstance(event, ScalarEvent):
            self._weight += 1 + len(event.value)
            value, height = self._scalar(event), 0
        elif isinstance(event, (SequenceStartEvent, MappingStartEvent)):
            self._weight += 1
            self._depth += 1
            if self._depth > self._max_depth:
                raise YamlError(f"nested deeper than {self._max_depth} levels", _line(event))
            value, height = self._collection(event)
            self._depth -= 1
        else:
            raise YamlError(f"unexpected {type(event).__name__}", _line(event))
        if anchor is not None:
            self._anchors[anchor] = (value, self._weight - start, height)
        return value, height

    def _alias(self, event: AliasEvent) -> tuple[Value, int]:
        line = _line(event)
        anchor = event.anchor
        if anchor not in self._anchors:
            raise YamlError(
                f"alias *{cut(str(anchor), 60)} refers to no complete anchor (undefined or recursive)", line
            )
        self._aliases += 1
        if self._aliases > self._max_aliases:
            raise YamlError(f"more than {self._max_aliases} aliases", line)
        value, weight, height = self._anchors[anchor]
        self._expansion += weight
        self._weight += weight
        if self._expansion > self._max_expansion:
            raise YamlError(f"aliases expand to more than {self._max_expansion} units", line)
        if self._depth + height > self._max_depth:
            raise YamlError(f"alias *{cut(str(anchor), 60)} nests deeper than {self._max_depth} levels", line)
        return value, height

    def _scalar(self, event: ScalarEvent) -> Value:
        tag = event.tag
        if tag is None or tag == "!":
            plain = event.style in (None, "") and tag is None
            return _plain(event.value) if plain else event.value
        return _tagged(tag, event.value, _line(event) or 0)

    def _collection(self, event: Event) -> tuple[Value, int]:
        tag: str | None = event.tag  # type: ignore[attr-defined]
        is_map = isinstance(event, MappingStartEvent)
        expected = f"{_TAG}map" if is_map else f"{_TAG}seq"
        if tag not in (None, "!", expected):
            raise YamlError(f"unsupported tag {quoted(tag)}", _line(event))
        return self._mapping(event) if is_map else self._sequence()

    def _sequence(self) -> tuple[Value, int]:
        items: list[Value] = []
        height = 0
        while not isinstance(self._peek(), SequenceEndEvent):
            value, child = self._node()
            items.append(value)
            height = max(height, child)
        self._take()
        return items, height + 1

    def _mapping(self, start: Event) -> tuple[Value, int]:
        mapping: dict[Value, Value] = {}
        height = 0
        while not isinstance(self._peek(), MappingEndEvent):
            written = self._peek()
            key_line = _line(written)
            key, key_height = self._node()
            if isinstance(key, (list, dict)):
                raise YamlError("a mapping key must be a scalar", key_line)
            if not isinstance(key, str):
                # A key read as a number, a boolean or null names a field as written (`1:` is "1"): JSON
                # has only text keys, and `1:` beside `"1":` (or `true:` beside `1:`, equal in Python)
                # must be a duplicate or not as the writer sees it, not lose a value.
                key = written.value if isinstance(written, ScalarEvent) else str(key)
            if key in mapping:
                raise YamlError(f"duplicate key {quoted(key)}", key_line)
            value, child = self._node()
            mapping[key] = value
            height = max(height, key_height, child)
        self._take()
        return mapping, height + 1


def _no_event() -> Event:
    raise YamlError("no event stream")


def _line(event: Event) -> int | None:
    mark = event.start_mark
    return mark.line + 1 if mark is not None else None
