"""How ``subagent-bus init`` merges its parts into a repository's files, keeping everything else.

Each merge takes a file's current text (None: missing) and returns its new text (None: unchanged) and what
was done, or raises :class:`Conflict` for a part that differs from what init writes (a hand edit) unless
``force`` replaces it.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import math
import shlex
from collections.abc import Callable
from typing import Any, Final

from agents.task_hook import HOOK_COMMAND, URL_VARIABLE
from bus.cli_connection import DEFAULT_DATA_DIR
from bus.display import cut

__all__ = [
    "LOCAL_DATA",
    "MARK_END",
    "MARK_START",
    "SERVER_NAME",
    "URL_VARIABLE",
    "Conflict",
    "kept_url",
    "merge_gitignore",
    "merge_hooks",
    "merge_mcp",
    "merge_section",
]

MARK_START: Final = "<!-- subagent-bus:start -->"
MARK_END: Final = "<!-- subagent-bus:end -->"
SERVER_NAME: Final = "subagent-bus"
LOCAL_DATA: Final = str(DEFAULT_DATA_DIR)
"""Where commands run without a URL keep the local Redis and its data."""


class Conflict(Exception):
    """A file holds a part that differs from what init writes (or cannot be read as expected)."""


def merge_section(existing: str | None, section: str, force: bool) -> tuple[str | None, str]:
    """The file with the section added or replaced (None: unchanged) and what was done."""
    if existing is None or not existing.strip():
        return section, "protocol section written"
    starts, ends = existing.count(MARK_START), existing.count(MARK_END)
    if starts == 0 and ends == 0:
        return existing.rstrip("\n") + "\n\n" + section, "protocol section added"
    start, end = existing.find(MARK_START), existing.find(MARK_END)
    if starts != 1 or ends != 1 or end < start:
        raise Conflict(
            f"its {MARK_START} / {MARK_END} markers are damaged ({starts} start, {ends} end); "
            "fix or remove them by hand"
        )
    end += len(MARK_END)
    if end < len(existing) and existing[end] == "\n":
        end += 1
    if existing[start:end] == section:
        return None, "protocol section up to date"
    if not force:
        raise Conflict("its protocol section was edited (or written by another version); --force replaces it")
    return existing[:start] + section + existing[end:], "protocol section replaced"


def _json_object(existing: str | None, what: str) -> dict[str, Any]:
    if existing is None or not existing.strip():
        return {}
    try:
        value = json.loads(
            existing, object_pairs_hook=_unique, parse_float=_float, parse_int=_int, parse_constant=_not_json
        )
    except json.JSONDecodeError as exc:
        raise Conflict(f"it is not valid JSON ({exc}); fix it by hand") from None
    except RecursionError:
        raise Conflict("it is nested too deeply to be read as JSON; fix it by hand") from None
    except ValueError as exc:  # an integer of more than 4 300 digits, which Python refuses to read
        raise Conflict(f"it cannot be read as JSON here ({cut(str(exc), 60)}); fix it by hand") from None
    if not isinstance(value, dict):
        raise Conflict(f"it is not a JSON object of {what}")
    return value


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of the file, refused when it names a key twice: written back, it would keep only the
    last, and the other would be gone from the file without a word."""
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise Conflict(f"it names the key {cut(repr(key), 60)} twice in one object; fix it by hand")
        value[key] = item
    return value


def _int(text: str) -> int:
    """An integer of the file, refused when it would be written back otherwise (``-0`` as ``0``)."""
    value = int(text)
    if str(value) != text:
        raise Conflict(
            f"its number {cut(text, 60)} would be written back as {cut(str(value), 60)}; write it so, or "
            "fix it by hand"
        )
    return value


def _float(text: str) -> float:
    """A number of the file with a fraction or an exponent, refused when it would be written back otherwise
    (``1.10`` as ``1.1``, ``1e400`` as ``Infinity``, which is no JSON: the file would be unreadable)."""
    value = float(text)
    if not math.isfinite(value):
        raise Conflict(
            f"its number {cut(text, 60)} is beyond a double's range: written back, it would be Infinity, "
            "which is no JSON; fix it by hand"
        )
    if repr(value) != text:
        raise Conflict(
            f"its number {cut(text, 60)} would be written back as {cut(repr(value), 60)}; write it so, or "
            "fix it by hand"
        )
    return value


def _not_json(text: str) -> Any:
    raise Conflict(f"it holds {text}, which is no JSON; fix it by hand")


def _member(parent: dict[str, Any], name: str, kind: type[dict[str, Any]] | type[list[Any]]) -> Any:
    value = parent.setdefault(name, kind())
    if not isinstance(value, kind):
        raise Conflict(f"its {name!r} is not a JSON {'object' if kind is dict else 'array'}")
    return value


def _dumps(value: dict[str, Any]) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    try:
        text.encode()
    except UnicodeEncodeError:  # "\ud83d": an escape JSON allows, of a character UTF-8 cannot hold
        raise Conflict("it holds a lone surrogate escape (\\udXXX), which init cannot write back") from None
    return text


# What init writes differs from one run to another only in the URL: a part that is init's own but for its
# URL is taken as init's. A run without --url keeps that URL (as it keeps everything it would write the
# same way); a run with --url sets it without --force. Anything else that differs is a hand edit.


def _without_url(entry: Any) -> Any:
    """An ``mcpServers`` entry without its URL: the ``env`` that holds only the URL (or its reference)."""
    if isinstance(entry, dict) and isinstance(entry.get("env"), dict) and set(entry["env"]) == {URL_VARIABLE}:
        return {name: value for name, value in entry.items() if name != "env"}
    return entry


def _url_merge(
    what: str, current: Any, entry: Any, plain: Callable[[Any], Any], url_given: bool, force: bool
) -> str | None:
    """What is done to a part (None: it stays) that is ``current`` where init writes ``entry``, which is
    ``plain`` without its URL (``url_given``: whether the run has ``--url``)."""
    if current == entry:
        return None
    if plain(current) == plain(entry):
        return f"{what}: URL set" if url_given else None
    if current is not None and not force:
        raise Conflict(f"its {what} differs from what init writes; --force replaces it")
    return f"{what} {'replaced' if current is not None else 'added'}"


def merge_mcp(existing: str | None, entry: dict[str, Any], force: bool) -> tuple[str | None, str]:
    """``.mcp.json`` with the ``subagent-bus`` server (None: unchanged) and what was done."""
    config = _json_object(existing, "MCP servers")
    servers = _member(config, "mcpServers", dict)
    current = servers.get(SERVER_NAME)
    what = f"mcpServers.{SERVER_NAME}"
    done = _url_merge(what, current, entry, _without_url, "env" in entry, force)
    if done is None:
        kept = current != entry
        return None, f"{what} up to date{f' (its {URL_VARIABLE} kept)' if kept else ''}"
    earlier = current.get("env") if isinstance(current, dict) else None
    if "env" not in entry and isinstance(earlier, dict) and isinstance(earlier.get(URL_VARIABLE), str):
        entry = {**entry, "env": {URL_VARIABLE: earlier[URL_VARIABLE]}}  # replaced, but for its URL
        done += f" (its {URL_VARIABLE} kept)"
    servers[SERVER_NAME] = entry
    return _dumps(config), done


def _ours(group: Any) -> bool:
    hooks = group.get("hooks") if isinstance(group, dict) else None
    return isinstance(hooks, list) and any(
        isinstance(hook, dict) and str(hook.get("command", "")).startswith(HOOK_COMMAND) for hook in hooks
    )


def _hook_without_url(groups: Any) -> Any:
    """Hook groups with the ``--redis-url URL`` of init's hook command left out."""
    plain = copy.deepcopy(groups)
    for group in plain if isinstance(plain, list) else []:
        for hook in group.get("hooks", []) if isinstance(group, dict) else []:
            if isinstance(hook, dict) and isinstance(hook.get("command"), str):
                hook["command"] = _command_without_url(hook["command"])
    return plain


def kept_url(mcp: str | None, settings: str | None) -> str | None:
    """The URL an earlier run wrote into ``.mcp.json`` (a URL, not a reference to the environment) or
    else into the hook of ``.claude/settings.json``: a run without --url writes it into the other file
    too, should that one be missing, so that the hook's adapters publish where the MCP server reads."""
    with contextlib.suppress(Conflict):
        server = _json_object(mcp, "MCP servers").get("mcpServers", {})
        entry = server.get(SERVER_NAME) if isinstance(server, dict) else None
        env = entry.get("env") if isinstance(entry, dict) else None
        url = env.get(URL_VARIABLE) if isinstance(env, dict) else None
        if isinstance(url, str) and not url.startswith("${"):
            return url
    with contextlib.suppress(Conflict):
        hooks = _json_object(settings, "settings").get("hooks", {})
        groups = hooks.get("PostToolUse") if isinstance(hooks, dict) else None
        if isinstance(groups, list):
            return _hook_url([group for group in groups if _ours(group)])
    return None


def _hook_url(groups: list[Any]) -> str | None:
    """The ``--redis-url`` of init's hook command among ``groups`` (wherever it is among its options), if
    it has one."""
    for group in groups:
        for hook in group.get("hooks", []):
            command = hook.get("command") if isinstance(hook, dict) else None
            if not isinstance(command, str) or not command.startswith(HOOK_COMMAND):
                continue
            with contextlib.suppress(ValueError):  # unbalanced quotes: no URL to be read
                words = shlex.split(command)
                for option, value in itertools.pairwise(words):
                    if option == "--redis-url":
                        return value
                named = [w.partition("=")[2] for w in words if w.startswith("--redis-url=")]
                if named:
                    return named[0]
    return None


def _command_without_url(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if " ".join(words[:-2]) == HOOK_COMMAND and words[-2] == "--redis-url":
        return HOOK_COMMAND
    return command


def merge_hooks(
    existing: str | None, entry: dict[str, Any], force: bool, *, url_given: bool = False
) -> tuple[str | None, str]:
    """``.claude/settings.json`` with the Task hook (None: unchanged) and what was done (``url_given``:
    the entry comes from a run with ``--url``, whose URL it may hold or leave to the environment)."""
    settings = _json_object(existing, "settings")
    events = _member(settings, "hooks", dict)
    groups = _member(events, "PostToolUse", list)
    found = [group for group in groups if _ours(group)]
    current = found or None
    done = _url_merge("PostToolUse hook", current, [entry], _hook_without_url, url_given, force)
    if done is None:
        return None, f"PostToolUse hook up to date{' (its --redis-url kept)' if current != [entry] else ''}"
    earlier = None if url_given else _hook_url(found)
    if earlier is not None:  # replaced, but for its URL
        entry = copy.deepcopy(entry)
        for hook in entry["hooks"]:
            hook["command"] += f" --redis-url {shlex.quote(earlier)}"
        done += " (its --redis-url kept)"
    for group in found:
        group["hooks"] = [hook for hook in group["hooks"] if not _ours({"hooks": [hook]})]
    emptied = {id(group) for group in found if not group["hooks"]}
    groups[:] = [group for group in groups if id(group) not in emptied]
    groups.append(entry)
    return _dumps(settings), done


def merge_gitignore(existing: str | None) -> tuple[str | None, str]:
    """``.gitignore`` with the local server's data directory in it: commands run without a URL (the MCP
    server, the hook's adapters) keep a Redis and its data in ``.subagent-bus/`` of the repository."""
    lines = (existing or "").splitlines()
    if any(line.strip().strip("/") == LOCAL_DATA for line in lines):
        return None, f"{LOCAL_DATA}/ already ignored"
    before = existing or ""
    if before and not before.endswith("\n"):
        before += "\n"
    return f"{before}{LOCAL_DATA}/\n", f"{LOCAL_DATA}/ ignored (the local Redis's data)"
