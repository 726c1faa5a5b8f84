"""Starting the agent of one launch request, wrapped by ``subagent-bus adapter run``.

The agent's prompt (identity statement and task) is written to a file, and the agent command built from a
template is started wrapped by ``subagent-bus adapter run``, which puts it on the bus. The template is
split like a shell line, the placeholders are replaced inside each argument, and nothing runs through a
shell. The adapter runs in a session of its own (so the agent outlives a launcher killed with SIGKILL),
writes to ``<agent>.log`` in the log directory, and has its pid recorded beside it (:mod:`agents.orphans`)
and, while its agent waits for its blocking delegates, an ``<agent>.idle`` file.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agents import launch_marks
from agents.agent_process import child_environment
from agents.delivery import DeliverySpec, delivery_problem, fill, program_problem
from agents.identity import build_prompt
from agents.orphans import PID_SUFFIX, Orphan, Proc, record
from bus.cli_connection import NAMESPACE_ENV, URL_ENV
from bus.directives import LaunchRequest
from bus.stop_signals import STOP_SIGNALS

__all__ = ["PLACEHOLDERS", "Spawner", "adapter_command", "file_stem"]

PLACEHOLDERS: Final = frozenset(
    {"agent_id", "group_id", "prompt_file", "prompt", "parent_agent_id", "request_id"}
)
_IDLE_SUFFIX: Final = ".idle"
_STARTED_SUFFIX: Final = ".started"
log = logging.getLogger("subagent_bus.launcher")


def adapter_command() -> list[str]:
    """How to run ``subagent-bus`` from this interpreter's installation."""
    beside = Path(sys.executable).parent / "subagent-bus"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("subagent-bus")
    if found:
        return [found]
    return [sys.executable, "-c", "from bus.cli import main; main()"]


AGENT_FILE: Final = "{agent_id}"
"""In the launcher's ``--deliver file:PATH``: each agent's own file (its id, as a file name)."""


def _own_file(agent_id: str, arg: str) -> str:
    """A ``--deliver file:PATH`` for this agent: its own file (the launcher makes PATH name
    :data:`AGENT_FILE`). Any other argument as it is: a command delivery fills its own placeholders."""
    return arg.replace(AGENT_FILE, file_stem(agent_id)) if arg.startswith("file:") else arg


def file_stem(agent_id: str) -> str:
    """An agent id usable as a file name (distinct ids stay distinct: ``a/b`` and ``a_b`` differ)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in agent_id).lstrip(".")
    safe = safe.encode()[:100].decode(errors="ignore")  # 100 bytes: a name has 255 (CJK takes 3 each)
    if safe != agent_id:
        safe = f"{safe}-{hashlib.sha256(agent_id.encode()).hexdigest()[:8]}"
    return safe


def started_mark(log_dir: Path, request: LaunchRequest, group_id: str) -> Path:
    """The mark of a request whose agent was started, kept until its acknowledgement is done: a launcher
    that reads the request again (the one that started it was killed before acknowledging it) does not
    start it a second time. Named after the group and agent too: two groups' agents can make requests of
    one id (a delegation's hashes its signal and its agent's id)."""
    name = file_stem(f"{group_id}\n{request.request_id}\n{request.new_agent_id}")
    return log_dir / f"{name}{_STARTED_SUFFIX}"


@dataclass(frozen=True, kw_only=True)
class Spawner:
    """Starts agents for one launcher: where their prompts, logs and pid files go, and how they reach
    the bus."""

    template: list[str]
    """The agent command, already split; see :data:`PLACEHOLDERS`."""
    prompt_dir: Path
    log_dir: Path
    adapter_args: tuple[str, ...]
    """Extra options for each ``adapter run`` (--deliver, --workdir, --heartbeat...)."""
    url: str
    """The URL the adapters use."""
    namespace: str
    cluster: bool | None
    """Passed on to the adapters as ``--cluster``/``--no-cluster``; None: each adapter asks the server."""
    launcher: Proc
    """The launcher process, recorded with each agent it starts."""

    def pid_file(self, agent_id: str) -> Path:
        """Where the pid of the agent's adapter is recorded while it runs."""
        return self.log_dir / f"{file_stem(agent_id)}{PID_SUFFIX}"

    def idle_file(self, agent_id: str) -> Path:
        """The file the agent's adapter keeps while its agent waits for its blocking delegates
        (``--idle-file``)."""
        return self.log_dir / f"{file_stem(agent_id)}{_IDLE_SUFFIX}"

    def started_file(self, request: LaunchRequest, group_id: str) -> Path:
        """The request's :func:`started_mark` in this launcher's log directory."""
        return started_mark(self.log_dir, request, group_id)

    def log_file(self, agent_id: str) -> Path:
        """Where the output of the agent's adapter goes."""
        return self.log_dir / f"{file_stem(agent_id)}.log"

    def started_files(self, request: LaunchRequest, group_id: str) -> tuple[Path, ...]:
        """The request's mark, and the one a launcher of an earlier version left, named after the request
        alone: read too, so that a launcher upgraded after a kill does not start the request again. That
        one only when the request's agent has a log here (it was made before the mark): another group's
        request of the same id, whose agent was not started here, is not taken for it."""
        earlier = self.log_dir / f"{file_stem(request.request_id)}{_STARTED_SUFFIX}"
        mark = self.started_file(request, group_id)
        return (mark, earlier) if self.log_file(request.new_agent_id).exists() else (mark,)

    def command(
        self,
        request: LaunchRequest,
        group_id: str,
        prompt_file: Path,
        prompt: str,
        started_fd: int | None = None,
    ) -> tuple[list[str], list[str]]:
        """The ``adapter run`` command line that starts this request's agent (the agent's command line
        last, after ``--``), and the agent's command line. Apart: an id may be ``--`` itself.
        ``started_fd``: the request's mark, which the adapter says started through
        (:mod:`agents.launch_marks`)."""
        agent = fill(
            self.template,
            {
                "agent_id": request.new_agent_id,
                "group_id": group_id,
                "prompt_file": str(prompt_file),
                "prompt": prompt,
                "parent_agent_id": request.parent_agent_id or "",
                "request_id": request.request_id,
            },
        )
        cluster = () if self.cluster is None else ("--cluster" if self.cluster else "--no-cluster",)
        adapter = [
            *adapter_command(),
            "adapter",
            "run",
            *cluster,
            "--agent-id",
            request.new_agent_id,
            "--group",
            group_id,
            "--task-file",
            str(prompt_file),
            "--quiet",
            "--wait-for-redis",
            "--idle-file",
            str(self.idle_file(request.new_agent_id)),
            *(_own_file(request.new_agent_id, arg) for arg in self.adapter_args),
            *(() if started_fd is None else ("--started-fd", str(started_fd))),
            "--",
        ]
        return [*adapter, *agent], agent

    async def start(self, request: LaunchRequest, group_id: str) -> tuple[asyncio.subprocess.Process, Path]:
        """Start the request's agent under an adapter; the adapter process and the path of its log.

        Raises ``OSError`` or ``ValueError`` when it cannot be started (the command line too long, a
        program that does not exist, a placeholder with no value).
        """
        prompt_file = (self.prompt_dir / f"{file_stem(request.new_agent_id)}.md").absolute()
        prompt = self._prompt(request)
        _, agent = self.command(request, group_id, prompt_file, prompt)
        problem = self._problem(agent, request.new_agent_id)
        if problem is not None:
            raise ValueError(problem)
        self.prompt_dir.mkdir(parents=True, exist_ok=True)
        prompt_file.write_text(prompt, encoding="utf-8")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        mark = self.started_file(request, group_id)
        held = launch_marks.begin(mark)  # passed on to the adapter, which says started through it too
        try:
            argv, _ = self.command(request, group_id, prompt_file, prompt, held)
            process = await self._spawn(request, group_id, argv, held)
        except BaseException:
            if held is not None:
                launch_marks.abandon(mark, held)
            raise
        orphan = Orphan(
            agent_id=request.new_agent_id,
            group_id=group_id,
            adapter=Proc.of(process.pid),
            launcher=self.launcher,
        )
        try:
            # the pid file first: the mark that says started keeps a restart from starting the agent, and
            # the pid file has it count the agent (:mod:`agents.orphans`)
            record(self.pid_file(request.new_agent_id), orphan)
            if held is None:
                launch_marks.write_started(mark)
            else:
                launch_marks.started(held)
        except OSError as exc:  # the agent runs: not a reason to start it again
            log.warning(
                f"{exc}: a launcher started after this one is killed will not count this agent, and may "
                "start it again"
            )
        finally:
            if held is not None:
                os.close(held)
        return process, self.log_file(request.new_agent_id)

    async def _spawn(
        self, request: LaunchRequest, group_id: str, argv: list[str], held: int | None
    ) -> asyncio.subprocess.Process:
        """The adapter started, its output going to the agent's log, the mark ``held`` passed on to it."""
        path = self.log_file(request.new_agent_id)
        self.idle_file(request.new_agent_id).unlink(missing_ok=True)  # left by an adapter killed with -9
        env = {
            **child_environment(),
            URL_ENV: self.url,
            NAMESPACE_ENV: self.namespace,
            # The agent's identity, for `subagent-bus listen` and `subagent-bus mcp` run by the agent.
            "SUBAGENT_BUS_AGENT_ID": request.new_agent_id,
            "SUBAGENT_BUS_GROUP": group_id,
        }
        # The adapter inherits the stop signals blocked and unblocks them once it handles them: a launcher
        # stopped the moment after this start would otherwise kill it before it could report anything,
        # and its agent would look running until declared lost.
        unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            with path.open("ab") as out:
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=out,
                    env=env,
                    start_new_session=True,
                    pass_fds=() if held is None else (held,),
                )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
        return process

    def _problem(self, agent: list[str], agent_id: str) -> str | None:
        """Why the adapter would refuse to start this agent: checked at each launch, as an adapter that
        refuses its options exits before it reports anything, and its request would be acknowledged as
        started and its agent wait to be declared lost. Its program (given by a placeholder, known only
        now; or gone since the launcher started, being reinstalled), the --workdir (removed), and the
        --deliver command's program or file (a directory now, or its directory removed)."""
        problem = program_problem(agent)
        workdir, deliver = (self._option(name) for name in ("--workdir", "--deliver"))
        if problem is None and workdir is not None and not Path(workdir).is_dir():
            problem = f"the --workdir {workdir} is no directory"
        if problem is None and deliver is not None:
            problem = delivery_problem(DeliverySpec.parse(_own_file(agent_id, deliver)))
        return problem

    def _option(self, name: str) -> str | None:
        """The value of an option of :attr:`adapter_args`, if given."""
        args = self.adapter_args
        return args[args.index(name) + 1] if name in args else None

    def _prompt(self, request: LaunchRequest) -> str:
        task = request.task.strip()
        if request.context and request.context.strip():
            task += f"\n\n## CONTEXT\n{request.context.strip()}"
        return build_prompt(task, request.new_agent_id)
