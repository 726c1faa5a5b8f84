"""How ``subagent-bus init`` merges its parts into a repository's files, keeping everything else.

Each merge takes a file's current text (None: missing) and returns its new text (None: unchanged) and what
was done, or raises :class:`Conflict` for a part that differs from what init writes (a hand edit) unless
``force`` replaces it.
"""

from __future__ import annotations

import json
from typing import Any, Final

from agents.task_hook import HOOK_COMMAND
from bus.cli_connection import DEFAULT_DATA_DIR

__all__ = [
    "LOCAL_DATA",
    "MARK_END",
    "MARK_START",
    "SERVER_NAME",
    "URL_VARIABLE",
    "Conflict",
    "merge_gitignore",
    "merge_hooks",
    "merge_mcp",
    "merge_section",
]

MARK_START: Final = "<!-- subagent-bus:start -->"
MARK_END: Final = "<!-- subagent-bus:end -->"
SERVER_NAME: Final = "subagent-bus"
URL_VARIABLE: Final = "SUBAGENT_BUS_REDIS_URL"
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
        value = json.loads(existing)
    except json.JSONDecodeError as exc:
        raise Conflict(f"it is not valid JSON ({exc}); fix it by hand") from None
    except RecursionError:
        raise Conflict("it is nested too deeply to be read as JSON; fix it by hand") from None
    if not isinstance(value, dict):
        raise Conflict(f"it is not a JSON object of {what}")
    return value


def _member(parent: dict[str, Any], name: str, kind: type[dict[str, Any]] | type[list[Any]]) -> Any:
    value = parent.setdefault(name, kind())
    if not isinstance(value, kind):
        raise Conflict(f"its {name!r} is not a JSON {'object' if kind is dict else 'array'}")
    return value


def _dumps(value: dict[str, Any]) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def merge_mcp(existing: str | None, entry: dict[str, Any], force: bool) -> tuple[str | None, str]:
    """``.mcp.json`` with the ``subagent-bus`` server (None: unchanged) and what was done."""
    config = _json_object(existing, "MCP servers")
    servers = _member(config, "mcpServers", dict)
    current = servers.get(SERVER_NAME)
    if current == entry:
        return None, f"mcpServers.{SERVER_NAME} up to date"
    if _keeps_url(current, entry):
        return None, f"mcpServers.{SERVER_NAME} up to date (its {URL_VARIABLE} kept)"
    if current is not None and not force:
        raise Conflict(f"its mcpServers.{SERVER_NAME} differs from what init writes; --force replaces it")
    servers[SERVER_NAME] = entry
    return _dumps(config), f"mcpServers.{SERVER_NAME} {'replaced' if current is not None else 'added'}"


def _keeps_url(current: Any, entry: dict[str, Any]) -> bool:
    """Whether ``current`` is ``entry`` plus the URL (or its reference) an ``init --url`` wrote: a run
    without ``--url`` leaves it, as it leaves everything else it would write the same way."""
    if "env" in entry or not isinstance(current, dict) or not isinstance(current.get("env"), dict):
        return False
    rest = {name: value for name, value in current.items() if name != "env"}
    return rest == entry and set(current["env"]) == {URL_VARIABLE}


def _ours(group: Any) -> bool:
    hooks = group.get("hooks") if isinstance(group, dict) else None
    return isinstance(hooks, list) and any(
        isinstance(hook, dict) and str(hook.get("command", "")).startswith(HOOK_COMMAND) for hook in hooks
    )


def merge_hooks(existing: str | None, entry: dict[str, Any], force: bool) -> tuple[str | None, str]:
    """``.claude/settings.json`` with the Task hook (None: unchanged) and what was done."""
    settings = _json_object(existing, "settings")
    events = _member(settings, "hooks", dict)
    groups = _member(events, "PostToolUse", list)
    found = [group for group in groups if _ours(group)]
    if found == [entry]:
        return None, "PostToolUse hook up to date"
    if found and not force:
        raise Conflict(
            "its PostToolUse hook running subagent-bus differs from what init writes; --force replaces it"
        )
    for group in found:
        group["hooks"] = [hook for hook in group["hooks"] if not _ours({"hooks": [hook]})]
    emptied = {id(group) for group in found if not group["hooks"]}
    groups[:] = [group for group in groups if id(group) not in emptied]
    groups.append(entry)
    return _dumps(settings), f"PostToolUse hook {'replaced' if found else 'added'}"


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
