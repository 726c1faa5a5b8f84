"""``subagent-bus init hook-task``: Claude Code's ``PostToolUse`` hook of the Task tool.

Claude Code runs the hook after each Task call and writes the call as JSON on the hook's stdin
(``session_id``, ``cwd``, ``tool_name``, ``tool_input``, ``tool_response``...). When the response is a
background launch (seed 004: ``status: async_launched`` with ``agentId`` and ``outputFile``), the hook
starts ``subagent-bus adapter watch <outputFile> --agent-id <agentId> --group <group> --until-complete``
in a session of its own, so it outlives the hook, and returns at once. The adapter publishes the agent's
signals and results, and stops once the agent completed.

A resumed agent (Task ``resume``) is launched again under the same ``agentId``. Its adapter is recorded
in ``<log dir>/<agent>.watch``: while it runs, a launch with the same output file and group starts no
second one (it follows the file on), and a launch with another file has it finish once a new adapter
follows the new one: sent SIGUSR1, it publishes the rest of the earlier run's file, then ends.

The adapter runs in the project directory (``--project-dir``, which Claude Code sets as
``CLAUDE_PROJECT_DIR``; else the call's ``cwd``), where a relative ``--log-dir`` is too: a session that
changed directory since still finds the adapters it started, and the same local server.

The group is ``--group`` (or ``SUBAGENT_BUS_GROUP``), else the Claude Code session id: every background
agent of one session is one task group. The agent's prompt goes to ``<log dir>/<agent>.prompt.md`` and
into AGENT_STARTED; the adapter's messages go to ``<log dir>/<agent>.log``. The adapter reaches Redis at
``--redis-url`` (which ``init --url`` writes into the hook's command), else as configured in the hook's
environment (``SUBAGENT_BUS_REDIS_URL``), else the local server of the project directory.

Any other call (a foreground Task, another tool) is ignored with exit status 0. Input that is not a hook
call, or a launch the adapter would refuse (an agent or group id it does not take, an output file that is
a directory), is reported on stderr with exit status 1, which Claude Code shows without blocking anything.
Limitation: the hook does not deliver directives to the background agent; the parent resumes it (Task
``resume``) with the prompt the coordinator sends, or the agent waits for it itself with ``listen``.
"""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import click
import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from agents.agent_process import child_environment
from agents.options import id_problem
from agents.orphans import Adapter, Proc, record
from agents.spawn import adapter_command, file_stem
from agents.watched_file import canonical
from agents.whole_input import read_whole
from bus.cli_connection import URL_ENV
from bus.display import cut
from bus.errors import ConfigError
from bus.params import EnvOption
from bus.settings import Settings

__all__ = [
    "HOOK_COMMAND",
    "MAX_INPUT_BYTES",
    "URL_VARIABLE",
    "TaskLaunch",
    "hook_task",
    "task_launch",
]

HOOK_COMMAND: Final = "subagent-bus init hook-task"
MAX_INPUT_BYTES: Final = 16 << 20
URL_VARIABLE: Final = URL_ENV
"""Where Redis commands find their URL."""


@dataclass(frozen=True)
class TaskLaunch:
    """A background agent Claude Code just launched."""

    agent_id: str
    output_file: Path
    session_id: str | None
    cwd: Path | None
    name: str | None
    prompt: str | None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


_IDLE_STOP_S: Final = 3600
"""How long a hook's adapter waits for its file to grow before it ends (``--idle-stop``)."""
_MAX_ERROR_CHARS: Final = 400
"""The most of an error the hook prints: Claude Code shows it to the model, and the hook input, up to 16
MiB, may hold ids and paths of any length (an ``OSError`` quotes a path whole)."""


def _shown(path: Path) -> str:
    return cut(str(path), 60)


def task_launch(call: Any) -> TaskLaunch | None:
    """The background launch in a hook call, or None when the call is anything else."""
    if not isinstance(call, dict):
        raise ValueError("the hook input is not a JSON object")
    response = call.get("tool_response")
    if not isinstance(response, dict):
        return None
    agent_id = _str(response.get("agentId"))
    output = _str(response.get("outputFile"))
    if agent_id is None or output is None or response.get("status", "async_launched") != "async_launched":
        return None
    if (problem := id_problem(agent_id)) is not None:
        raise ValueError(f"the agentId {cut(repr(agent_id), 60)} {problem}")
    tool_input = call.get("tool_input")
    if not isinstance(tool_input, dict):
        tool_input = {}
    cwd = _str(call.get("cwd"))
    return TaskLaunch(
        agent_id=agent_id,
        output_file=Path(output),
        session_id=_str(call.get("session_id")),
        cwd=Path(cwd) if cwd else None,
        name=_str(tool_input.get("subagent_type")),
        prompt=_str(tool_input.get("prompt")) or _str(response.get("prompt")),
    )


def watch_argv(launch: TaskLaunch, group_id: str, output: Path, task_file: Path | None) -> list[str]:
    """The adapter command that follows the agent's output file (``output``, absolute)."""
    argv = [*adapter_command(), "adapter", "watch"]
    # --wait-for-redis: one started while the server is down (restarting) would exit before following
    argv += ["--agent-id", launch.agent_id, "--group", group_id, "--until-complete", "--wait-for-redis"]
    # An agent that ends without a completion (its session closed) would hold its adapter for ever: one
    # idle that long ends, and the agent's resume, a launch, has the hook start another (from the checkpoint)
    argv += ["--idle-stop", str(_IDLE_STOP_S)]
    if launch.name:
        argv += ["--name", launch.name]
    if task_file is not None:
        argv += ["--task-file", str(task_file)]
    return [*argv, "--", str(output)]


class _Watcher(BaseModel):
    """What ``<agent>.watch`` says: the adapter that follows the agent, where it publishes, and the file
    it follows."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    adapter: Adapter
    group_id: str
    output_file: str


def _running(path: Path) -> _Watcher | None:
    """The adapter a hook started for the agent before, if it still runs: known by its start time too,
    so that a record whose pid now names another process (or one written by something else) stops
    nothing. Where no ``/proc`` tells a start time, no record is trusted: a resumed agent then gets a
    second adapter beside the first (see the README)."""
    try:
        watcher = _Watcher.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None  # none recorded, or not by this hook: nothing to stop
    adapter = watcher.adapter
    return watcher if adapter.started is not None and adapter.alive() else None


def _base(project_dir: Path | None, launch: TaskLaunch) -> Path:
    """The project directory, else the call's (a project directory that is gone is no reason to leave
    the agent unfollowed: exit status 2 would even block Claude Code's session)."""
    if project_dir is not None and project_dir.is_dir():
        return project_dir.absolute()
    return (launch.cwd if launch.cwd is not None and launch.cwd.is_dir() else Path.cwd()).absolute()


def _start(
    launch: TaskLaunch, group_id: str, base: Path, log_dir: Path, url: str | None
) -> tuple[Path, bool]:
    """Start the adapter detached in ``base`` (unless one follows the same file for the same group
    already); the path of its log and whether it was started."""
    cwd = launch.cwd if launch.cwd is not None and launch.cwd.is_dir() else base
    if "\0" in str(launch.output_file):
        raise ValueError("the outputFile holds a NUL byte")
    output = canonical(cwd / launch.output_file)
    if output.is_dir():
        raise ValueError(f"the outputFile {_shown(launch.output_file)} is a directory")
    if output.exists() and not output.is_file():  # the adapter would refuse it (it may not exist yet)
        raise ValueError(
            f"the outputFile {_shown(launch.output_file)} is a pipe or a device, not a regular file"
        )
    env = child_environment()
    if url is not None:
        env[URL_VARIABLE] = url
    logs = log_dir if log_dir.is_absolute() else base / log_dir
    logs.mkdir(parents=True, exist_ok=True)
    stem = file_stem(launch.agent_id)
    log, recorded = logs / f"{stem}.log", logs / f"{stem}.watch"
    previous = _running(recorded)
    if previous is not None and (previous.group_id, previous.output_file) == (group_id, str(output)):
        return log, False
    task_file = None
    if launch.prompt is not None:
        task_file = logs / f"{stem}.prompt.md"
        task_file.write_text(launch.prompt, encoding="utf-8")
    # Started with SIGUSR1 blocked, which it unblocks once it handles it: sent (by a later resume) before
    # that, it would end the adapter at once, with the rest of its file unpublished.
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:
        with log.open("ab") as stderr:
            adapter = subprocess.Popen(
                watch_argv(launch, group_id, output, task_file),
                cwd=base,  # where the local server is, when there is no URL
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
                env=env,  # without a metrics port: every adapter would try to serve on the one it names
            )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    if previous is not None:  # it follows the earlier file (or group): it publishes the rest, then ends
        previous.adapter.send(signal.SIGUSR1)
    watcher = _Watcher(adapter=Proc.of(adapter.pid), group_id=group_id, output_file=str(output))
    try:
        record(recorded, watcher)
    except OSError as exc:  # it runs all the same
        click.echo(f"subagent-bus: {exc}: a resume of {launch.agent_id} will not find this adapter", err=True)
    return log, True


@click.command("hook-task")
@click.option(
    "--group",
    "group_id",
    envvar="SUBAGENT_BUS_GROUP",
    cls=EnvOption,
    help="Task group of the launched agents (default: the Claude Code session id).",
)
@click.option(
    "--log-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".subagent-bus/hooks"),
    show_default=True,
    help="Where prompts and adapter logs go (relative: to the project directory).",
)
@click.option(
    "--project-dir",
    type=click.Path(path_type=Path),  # checked by _base: exit status 2 would block Claude Code
    envvar="CLAUDE_PROJECT_DIR",
    cls=EnvOption,
    help="The directory a relative --log-dir and the local server belong to, wherever the session has "
    "gone since (default, and when it is no directory: the directory of the call, its cwd).",
)
@click.option(
    "--redis-url",
    "url",
    metavar="URL",
    envvar=URL_VARIABLE,
    cls=EnvOption,
    help="The Redis the adapters publish to (default: the local server).",
)
def hook_task(group_id: str | None, log_dir: Path, project_dir: Path | None, url: str | None) -> None:
    """PostToolUse hook of Claude Code's Task tool: follow a background agent with an adapter.

    Reads the hook call (JSON) on stdin. Exit status 0 when an adapter was started or the call was not a
    background launch, 1 when the input was unusable (the reason is on stderr).
    """
    try:
        data = read_whole("-", MAX_INPUT_BYTES, what="the hook input")
        try:
            call = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"the hook input is not JSON: {exc}") from None
        launch = task_launch(call)
        if launch is None:
            return
        group = group_id or launch.session_id
        if not group:
            raise ValueError("no task group: the call has no session_id; pass --group")
        if (problem := id_problem(group)) is not None:
            raise ValueError(f"the task group {cut(repr(group), 60)} {problem}")
        if url is not None:
            Settings.from_url(url)  # what the adapter would refuse at once, refused where it is seen
        log, started = _start(launch, group, _base(project_dir, launch), log_dir, url)
    except (OSError, ValueError, ConfigError) as exc:
        raise click.ClickException(cut(str(exc), _MAX_ERROR_CHARS)) from None
    following = "following" if started else "already following"
    click.echo(
        f"subagent-bus: {following} {launch.agent_id} (group {group}) from {launch.output_file}; log: {log}"
    )
