"""``subagent-bus init``: wire the protocol into a repository for an agent runtime, idempotently.

For Claude Code (``--agent claude-code``, the default) it writes or merges:

- ``.mcp.json``: the ``mcpServers`` entry ``subagent-bus`` running ``subagent-bus mcp``. With ``--url`` the
  server gets ``SUBAGENT_BUS_REDIS_URL``, unless the URL holds a password: committed files never hold
  secrets, so the entry then refers to the variable (``${SUBAGENT_BUS_REDIS_URL}``, which Claude Code
  expands from its environment) and init says to export it;
- ``CLAUDE.md``: the protocol section between ``<!-- subagent-bus:start -->`` and
  ``<!-- subagent-bus:end -->`` (what it says is :mod:`agents.protocol_section`'s);
- ``.claude/settings.json``: a ``PostToolUse`` hook on the Task tool running ``subagent-bus init
  hook-task`` (:mod:`agents.task_hook`), which puts each background agent's output file under
  ``subagent-bus adapter watch``; with ``--url`` (one without a password) it runs with ``--redis-url URL``,
  so that the adapters reach the same Redis as the MCP server;
- ``.gitignore``: ``.subagent-bus/``, where commands run without a URL keep the local Redis.

For Codex (``--agent codex``) it writes the section into ``AGENTS.md`` (the same section: one file may
serve both) and ``.gitignore``, and prints the MCP server entry for ``~/.codex/config.toml``, a file
outside the repository that init does not touch; Codex has no hooks.

Everything else in those files is kept: other servers, other hooks, the rest of the Markdown. Running init
again changes nothing and says so; without ``--url`` it keeps the URL (or reference) an earlier run
wrote, and with ``--url`` it sets that URL in what an earlier run wrote. A part that differs from what
init would write (a hand edit of the section, another ``subagent-bus`` server entry or hook) is left
alone and reported, and nothing at all is written, unless ``--force`` replaces it (the merges are
:mod:`agents.init_merge`'s); so are a link that leads out of the repository and a read-only file. The
new files are written first, then each replaces its old one.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import shlex
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import click

from agents.init_merge import (
    URL_VARIABLE,
    Conflict,
    kept_url,
    merge_gitignore,
    merge_hooks,
    merge_mcp,
    merge_section,
)
from agents.protocol_section import protocol_section
from agents.task_hook import HOOK_COMMAND, hook_task
from bus.settings import check_url, redact

__all__ = [
    "HOOK_MATCHER",
    "URL_REFERENCE",
    "AgentKind",
    "Change",
    "Merge",
    "has_secret",
    "hook_entry",
    "init",
    "plan",
    "server_entry",
]

URL_REFERENCE: Final = "${SUBAGENT_BUS_REDIS_URL}"
HOOK_MATCHER: Final = "^(Task|Agent)$"
"""The Task tool (called Agent by newer Claude Code versions); anchored, as a matcher is a regex."""
_HOOK_TIMEOUT_S: Final = 30


class AgentKind(StrEnum):
    CLAUDE_CODE = "claude-code"
    CODEX = "codex"


@dataclass(frozen=True)
class Change:
    """The new content of one file (None: unchanged) and what changed, for the report."""

    path: Path
    content: str | None
    detail: str
    existed: bool


def has_secret(url: str) -> bool:
    """Whether a Redis URL carries a password: what :func:`bus.settings.redact` masks (the user info's
    password, and every query option named ``*password``)."""
    return redact(url) != url


def server_entry(url: str | None) -> dict[str, Any]:
    """The ``mcpServers`` entry; the URL is written only when it holds no secret."""
    entry: dict[str, Any] = {"type": "stdio", "command": "subagent-bus", "args": ["mcp"]}
    if url is not None:
        entry["env"] = {URL_VARIABLE: URL_REFERENCE if has_secret(url) else url}
    return entry


def hook_entry(url: str | None = None) -> dict[str, Any]:
    """The ``PostToolUse`` matcher group that starts an adapter for each background Task agent; the URL
    is written only when it holds no secret (else the hook's environment gives it, as to the MCP server)."""
    command = HOOK_COMMAND
    if url is not None and not has_secret(url):
        command += f" --redis-url {shlex.quote(url)}"
    return {
        "matcher": HOOK_MATCHER,
        "hooks": [{"type": "command", "command": command, "timeout": _HOOK_TIMEOUT_S}],
    }


MAX_FILE_BYTES: Final = 16 << 20
"""A file ``init`` edits that is larger than this is left alone (a CLAUDE.md is a few kilobytes)."""


def _read(path: Path) -> bytes | None:
    try:
        # Opened without blocking, and read only when it is a regular file: a FIFO in its place would
        # wait for a writer forever, and a device would be read without end.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Conflict(f"cannot be read: {exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Conflict("it is not a regular file (a FIFO, a device or a directory): init edits files only")
    with open(fd, "rb") as stream:
        try:
            raw = stream.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise Conflict(f"cannot be read: {exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise Conflict(f"it is larger than {MAX_FILE_BYTES} bytes, which is no file init edits")
    return raw


def _text(raw: bytes) -> str:
    """A file's text with LF line ends, without a byte order mark (Windows editors write one)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Conflict(f"cannot be read: {exc}") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _as_before(raw: bytes, content: str) -> str:
    """``content`` (merged with LF line ends) with the line ends and byte order mark of the file ``raw``
    it replaces: init changes its own part of a file, not the rest of its lines."""
    if raw.count(b"\r\n") * 2 > raw.count(b"\n"):
        content = content.replace("\n", "\r\n")
    return "\ufeff" + content if raw.startswith(codecs.BOM_UTF8) else content


Merge = Callable[[str | None], tuple[str | None, str]]
"""A file's current text (None: missing) to its new text (None: unchanged) and what was done."""


def _readable(directory: Path, relative: str) -> str | None:
    """The text of a file init edits, None if it is missing or cannot be read (then its merge says why)."""
    with contextlib.suppress(Conflict):
        raw = _read(_inside(directory, Path(relative)))
        return None if raw is None else _text(raw)
    return None


def plan(directory: Path, agent: AgentKind, url: str | None, force: bool) -> list[Change]:
    """What init would write, file by file; :class:`Conflict` lists every file it must not touch."""
    section = protocol_section()
    targets: list[tuple[Path, Merge]] = [
        (Path("AGENTS.md"), lambda text: merge_section(text, section, force))
    ]
    if agent is AgentKind.CLAUDE_CODE:
        mcp_url, hook_url = url, url
        if url is None:  # a file of the two that is missing gets the URL an earlier run wrote in the other
            mcp, hooks = (_readable(directory, name) for name in (".mcp.json", ".claude/settings.json"))
            kept = kept_url(mcp, hooks)
            mcp_url, hook_url = (kept if text is None else None for text in (mcp, hooks))
        targets = [
            (Path(".mcp.json"), lambda text: merge_mcp(text, server_entry(mcp_url), force)),
            (Path("CLAUDE.md"), lambda text: merge_section(text, section, force)),
            (
                Path(".claude/settings.json"),
                lambda text: merge_hooks(text, hook_entry(hook_url), force, url_given=url is not None),
            ),
        ]
    targets.append((Path(".gitignore"), merge_gitignore))
    changes: list[Change] = []
    problems: list[str] = []
    for relative, merge in targets:
        try:
            raw = _read(_inside(directory, relative))
            existing = None if raw is None else _text(raw)
            content, detail = merge(existing)
            if content is not None and raw is not None:
                content = _as_before(raw, content)
            if content is not None and existing is not None and not _writable(directory / relative):
                raise Conflict("it is read-only; make it writable for init to update it")
        except Conflict as exc:
            problems.append(f"{relative}: {exc}")
            continue
        changes.append(Change(relative, content, detail, existing is not None))
    if problems:
        raise Conflict("\n".join(problems))
    return changes


def _inside(directory: Path, relative: Path) -> Path:
    """The file, unless it (or a directory on its way) is a link that leads out of the repository: init
    writes where links lead (``CLAUDE.md`` -> ``AGENTS.md``), and a cloned repository's links could lead
    it to a file of the user's (``~/.claude/settings.json``, ``~/.bashrc``)."""
    path = directory / relative
    try:
        target = path.resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links (RuntimeError before Python 3.13)
        raise Conflict(f"it cannot be followed: {exc}") from None
    if not target.is_relative_to(directory.resolve()):
        raise Conflict(f"it leads out of the repository (to {target}); init does not write there")
    return path


def _writable(path: Path) -> bool:
    """Whether the file's mode lets anyone write it (root may write any file: this asks what it means)."""
    return bool(path.stat().st_mode & 0o222)


def _stage(path: Path, content: str) -> tuple[Path, Path]:
    """Write ``content`` beside the file it replaces: (the new file, the file it replaces)."""
    path = path.resolve()  # a link (CLAUDE.md -> AGENTS.md): update the file it names, keep the link
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as stream:
            stream.write(content)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, path.stat().st_mode & 0o7777 if path.exists() else 0o644)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return Path(temporary), path


def _write(directory: Path, changes: list[Change]) -> None:
    """Every change or, as far as the file system allows, none: the new files are written first, then
    they replace the old ones (one rename each)."""
    staged: list[tuple[Path, Path]] = []
    replaced: list[Path] = []
    try:
        for change in changes:
            if change.content is not None:
                staged.append(_stage(directory / change.path, change.content))
        for temporary, path in staged:
            os.replace(temporary, path)
            replaced.append(path)
    except BaseException as exc:
        for temporary, path in staged:
            if path not in replaced:
                temporary.unlink(missing_ok=True)
        if not isinstance(exc, OSError):
            raise
        done = ", ".join(str(path.relative_to(directory.resolve())) for path in replaced)
        written = f"written: {done}" if done else "nothing was written"
        raise click.ClickException(
            f"cannot write {exc.filename or 'a file'}: {exc.strerror or exc} ({written})"
        ) from None


def _codex_snippet(url: str | None) -> str:
    lines = ["[mcp_servers.subagent-bus]", 'command = "subagent-bus"', 'args = ["mcp"]']
    if url is not None and not has_secret(url):
        # a JSON string is a TOML basic string: quotes, backslashes and control characters escaped
        lines.append(f"env = {{ {URL_VARIABLE} = {json.dumps(url)} }}")
    return "\n".join(lines)


def _check_url(url: str | None) -> None:
    if url is None:
        return
    try:
        check_url(url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from None


@click.group("init", invoke_without_command=True)
@click.option(
    "--agent",
    type=click.Choice([kind.value for kind in AgentKind]),
    default=AgentKind.CLAUDE_CODE.value,
    show_default=True,
    help="The agent runtime to wire the protocol into.",
)
@click.option(
    "--url", metavar="URL", help="Redis URL for the MCP server and the hook (a password is never written)."
)
@click.option("--force", is_flag=True, help="Replace parts that differ from what init writes.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    help="The repository to set up (default: the current directory).",
)
@click.pass_context
def init(ctx: click.Context, agent: str, url: str | None, force: bool, directory: Path) -> None:
    """Set up a repository: MCP server entry, protocol section of the agent's instructions, hooks.

    Safe to run again: files are merged, and a second run changes nothing. A part that was edited by hand
    is refused (nothing is written) unless --force. Exit status 0 when done or already done, 1 refused.
    """
    if ctx.invoked_subcommand is not None:
        return
    _check_url(url)
    kind = AgentKind(agent)
    try:
        changes = plan(directory, kind, url, force)
    except Conflict as exc:
        raise click.ClickException(f"nothing was written:\n{exc}") from None
    _write(directory, changes)
    for change in changes:
        if change.content is None:
            click.echo(f"unchanged {change.path} ({change.detail})")
        else:
            click.echo(f"{'updated' if change.existed else 'created'} {change.path} ({change.detail})")
    if all(change.content is None for change in changes):
        click.echo("nothing to change: already set up")
    secret = url is not None and has_secret(url)
    if secret and kind is AgentKind.CLAUDE_CODE:
        click.echo(
            "the URL holds a password, which is not written into any file: the MCP server and the hook read "
            f"the URL from ${URL_VARIABLE}; export it before starting the agent."
        )
    if kind is AgentKind.CODEX:
        click.echo(f"add this to ~/.codex/config.toml:\n\n{_codex_snippet(url)}")
        if secret:  # Codex hands an MCP server only a few variables of its own environment, not this one
            click.echo(f'\nand the URL, password included, in its env: {{ {URL_VARIABLE} = "..." }}')


init.add_command(hook_task)
