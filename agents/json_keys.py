"""The keys a JSON text gives more than once in one object, which the JSON parsers in use settle silently
(the last value wins): for a reader that refuses such a text rather than take one of the values."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KeysTwice", "keys_given_twice"]


@dataclass
class KeysTwice:
    """The keys given more than once in an object of a text, at any depth, and in its outermost one."""

    keys: list[str] = field(default_factory=list)
    outermost: list[str] = field(default_factory=list)

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
            self.keys += [key for key in self.outermost if key not in self.keys]
        return value


def keys_given_twice(text: str) -> KeysTwice:
    """The keys ``text`` gives twice; none when it is no JSON this parser reads (too deeply nested)."""
    found = KeysTwice()
    try:
        json.loads(text, object_pairs_hook=found)
    except (ValueError, RecursionError):
        return KeysTwice()
    return found
