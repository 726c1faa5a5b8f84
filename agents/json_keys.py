"""The keys a JSON text gives more than once in one object, which the JSON parsers in use settle silently
(the last value wins): for a reader that refuses such a text rather than take one of the values.

orjson and the MCP SDK read the text; the keys are counted by a second reading with the standard
library's parser, whose ``object_pairs_hook`` sees every key (escaped spellings too: ``"\\u0061"`` is
``"a"``). Only inputs read once take that second reading (a command's, a message's), no hot path; a
reader of many lines asks :func:`may_give_twice` first, which rules most lines out for less.
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Final

from bus.display import cut, one_line

__all__ = ["KeysTwice", "keys_given_twice", "may_give_twice", "twice_message"]

_LEVELS: Final = 1100
"""More levels of nesting than orjson reads (1024)."""
_DEEPER: Final = threading.Lock()

_KEY_ENDS: Final = (b'":', b'" ', b'"\t', b'"\r', b'"\n')
"""What follows the quote that ends a key: its colon, or the white space JSON allows before it."""


@dataclass
class KeysTwice:
    """The objects of a text that give a key more than once, at any depth, and its outermost one's keys."""

    found: list[tuple[dict[str, Any], list[str]]] = field(default_factory=list)
    """Each object (as read) that gives keys more than once, with those keys, innermost first."""
    outermost: list[str] = field(default_factory=list)
    value: Any = None
    """The text's value, whose objects are those of :attr:`found` (for telling which item holds one)."""
    hidden: dict[int, list[Any]] = field(default_factory=dict)
    """For an object (by identity) that gives keys more than once, the values its later ones replaced:
    an object of :attr:`found` may be one, which :attr:`value` no longer holds."""

    @property
    def keys(self) -> list[str]:
        """Every key given more than once in an object, each named once."""
        return list(dict.fromkeys(key for _, keys in self.found for key in keys))

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        """``json.loads``'s ``object_pairs_hook``: it is called for an object once its members are read,
        so the last call is the outermost object's."""
        value = dict(pairs)
        self.outermost = []
        if len(value) < len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen and key not in self.outermost:
                    self.outermost.append(key)
                seen.add(key)
            self.found.append((value, self.outermost))
            last = {key: n for n, (key, _) in enumerate(pairs)}
            self.hidden[id(value)] = [item for n, (key, item) in enumerate(pairs) if last[key] != n]
        return value


def keys_given_twice(text: str) -> KeysTwice:
    """The keys ``text`` gives twice; none when it is no JSON this parser reads (orjson and the SDK refuse
    it too)."""
    found = KeysTwice()
    # The standard library's parser counts a level of nesting as a call against the recursion limit (1000),
    # orjson reads 1024 levels: deeper than the limit, a duplicated key went unseen, taken at its last
    # value. The limit is raised while it reads (by one thread at a time: it is the whole process's).
    with _DEEPER:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(limit + _LEVELS)
        try:
            found.value = json.loads(text, object_pairs_hook=found)
        except (ValueError, RecursionError):
            return KeysTwice()
        finally:
            sys.setrecursionlimit(limit)
    return found


def may_give_twice(text: bytes, value: Any) -> bool:
    """Whether the JSON ``text``, read as ``value``, may give a key twice in one object (then ask
    :func:`keys_given_twice`): every key of every object ends in a quote followed by its colon or by
    white space, so a text with no more of those than its value, an object, has keys gives none twice.
    (A string may hold them too, or an object within: such a text is asked about.) Counting takes under
    half of the second reading."""
    return not isinstance(value, dict) or sum(map(text.count, _KEY_ENDS)) > len(value)


def twice_message(keys: list[str]) -> str:
    """``the key 'a' is given more than once in one object: give it once`` (or of up to five keys)."""
    names = ", ".join(repr(cut(one_line(key), 40)) for key in keys[:5])
    if len(keys) > 5:
        names += f" (and {len(keys) - 5} more)"
    if len(keys) == 1:
        return f"the key {names} is given more than once in one object: give it once"
    return f"the keys {names} are each given more than once in one object: give each once"
