"""``subagent-bus adapter watch|run|stdin|import-findings`` and ``subagent-bus prompt``.

Each command's body runs on the bus through :func:`agents.adapter_serve.serve` (connecting, waiting
for Redis, reporting what a stop signal left unpublished)."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import click

from agents.adapter import AgentBus, GaveUp
from agents.adapter_serve import serve
from agents.delivery import (
    CommandDelivery,
    Deliverer,
    DeliveryKind,
    FileDelivery,
    PrintDelivery,
)
from agents.delivery import Runner as DeliveryRunner
from agents.delivery_command import Stopping
from agents.findings_import import import_findings
from agents.inbox_follower import with_inbox
from agents.launch_marks import adapter_started
from agents.options import Common, check_program, common_options
from agents.process import ProcessOptions, Session
from agents.stdin import stdin_chunks
from agents.watch import FileWatch, WatchOptions
from agents.watch_resume import Turns, after_turn
from bus.cli_connection import redis_options
from bus.params import FiniteFloatRange
from bus.settings import Settings
from bus.stop_signals import STOP_SIGNALS, handled_stop_signals
from bus.waits import wait_for

__all__ = ["Common", "adapter", "commands"]

Values = Callable[[], Mapping[str, str | None]]


def _deliverer(
    common: Common, values: Values, runner: DeliveryRunner | None, bus: AgentBus
) -> Deliverer | None:
    spec = common.deliver
    if spec is None:
        return None
    if spec.kind is DeliveryKind.PRINT:
        return PrintDelivery()
    if spec.kind is DeliveryKind.FILE:
        assert spec.path is not None
        return FileDelivery(spec.path)
    return CommandDelivery(list(spec.argv), values, runner, log=bus.log, warn=bus.warn)


def _values(common: Common, session_id: Callable[[], str | None]) -> Values:
    return lambda: {"agent_id": common.agent_id, "group_id": common.group_id, "session_id": session_id()}


def _on_signals(handler: Callable[[int], None]) -> None:
    """Have ``handler`` take the stop signals the adapter was not started ignoring; its agent inherits
    the ignoring of the others, and outlives them too (``nohup``)."""
    loop = asyncio.get_running_loop()
    for sig in handled_stop_signals():
        loop.add_signal_handler(sig, handler, sig)
    # A launcher starts its adapters with these blocked (agents.spawn), so that one stopped as it started
    # waits until here to be told, instead of dying unheard: what came meanwhile is handled now.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@click.group("adapter")
def adapter() -> None:
    """Put an agent on the bus: parse its output into envelopes, deliver directives back to it.

    With --metrics-port an adapter serves Prometheus metrics: envelopes published by type
    (subagent_bus_entries_out), findings in results, bytes read, rejected blocks, directives delivered
    and failed deliveries, and its agent and group ids (subagent_bus_adapter_info). With --log-json each
    log line is a JSON object that carries the agent and group ids.
    """


@adapter.command("watch")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--until-complete",
    is_flag=True,
    help="Stop once the agent sent COMPLETION_REPORT, or its result report and nothing more for 2 s "
    "(the COMPLETION_REPORT it prints after the report is followed). With --pid and --deliver command, "
    "the process's end ends a turn, not the watch: the file and the inbox are followed on, and the agent "
    "resumed, until it completes; the resumed turns are read in the file, so the resume command writes "
    "there (claude --resume appends to the session's transcript; a command's own output goes to the log).",
)
@click.option(
    "--pid",
    type=click.IntRange(1, 2**31 - 1),
    help="The agent's process: heartbeats while it lives, AGENT_EXITED when it ends (the end of a turn, "
    "with --until-complete and --deliver command; then a resume command counts as a turn too).",
)
@click.option(
    "--poll",
    "poll_s",
    default=0.1,
    show_default=True,
    type=FiniteFloatRange(min=0.01, max=5),
    help="Seconds between checks for new bytes.",
)
@click.option(
    "--idle-stop",
    "idle_stop_s",
    type=FiniteFloatRange(min=0.01),
    metavar="SECONDS",
    help="Stop once the file has not grown for SECONDS (or, when it does not exist yet, has not appeared "
    "within SECONDS), as SIGTERM does (the agent is not said to have exited, and a block it left half "
    "written is not closed: a later watch of the file goes on from its checkpoint; a result report that "
    "ends the file is published). Default: never.",
)
@common_options
@redis_options
def watch(
    settings: Settings,
    common: Common,
    path: Path,
    until_complete: bool,
    pid: int | None,
    poll_s: float,
    idle_stop_s: float | None,
) -> None:
    """Follow a growing output file (a Claude Code outputFile, `codex exec --json` output, or any log);
    restarts resume where they stopped, truncation or replacement starts a new generation. The file may
    not exist yet.

    SIGUSR1 has it publish the file to its end (waiting for Redis as long as that takes) and exit,
    without saying the agent exited: the Task hook sends it when a resumed agent writes another file.

    SIGTERM, SIGINT and SIGHUP stop it. One that comes while a resume command (--deliver command)
    delivers a directive is passed on to the command, in a session of its own, and its exit waited for (a
    non-zero one is a failed delivery attempt: retried by the next run, or given up on after
    --max-attempts and the parent told); a second one kills the command.

    \b
    Example (a Claude Code background agent's output file):
      subagent-bus adapter watch --agent-id auditor --group audit --until-complete "$OUTPUT_FILE"
    """

    async def body(bus: AgentBus) -> int:
        stop, stopping = asyncio.Event(), Stopping()

        def on_signal(sig: int) -> None:
            stop.set()
            stopping.forward(sig)
            bus.sender.give_up(sig)  # what is unpublished stays in the file: the next watch takes it

        _on_signals(on_signal)
        resumes = until_complete and pid is not None and _commands(common)
        turns = Turns(pid)
        options = WatchOptions(
            path,
            common.fmt,
            until_complete,
            pid,
            common.heartbeat_s,
            poll_s,
            task=common.task,
            name=common.name,
            wait_for_redis=common.wait_for_redis,
            idle_stop_s=idle_stop_s,
            resumes=resumes,
        )
        follower = FileWatch(bus, options, stop, turns)
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, follower.finish)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})  # blocked by a hook that started it
        deliverer = _deliverer(
            common,
            _values(common, lambda: follower.session_id or common.session_id),
            after_turn(bus, turns, stop, poll_s, stopping),
            bus,
        )

        async def work() -> int:
            try:
                await follower.run()
            except GaveUp as exc:
                exc.kept = follower.kept()
                raise
            return 0

        return await with_inbox(
            bus, deliverer, work(), attempts=common.max_attempts, retry_ms=common.retry_ms
        )

    raise SystemExit(serve(settings, common, body))


def _commands(common: Common) -> bool:
    """Whether directives are delivered by a resume command (``--deliver command:``)."""
    return common.deliver is not None and common.deliver.kind is DeliveryKind.COMMAND


def _check_until_complete(until_complete: bool, common: Common) -> None:
    if until_complete and not _commands(common):
        raise click.UsageError(
            "--until-complete needs --deliver command:... (a resume command continues the agent)"
        )


def _check_stderr_log(path: Path) -> None:
    """Open ``--stderr-log`` once before the agent starts: one that cannot be written would otherwise
    fail only once the agent runs (a directory that does not exist, say)."""
    try:
        with path.open("ab"):
            pass
    except OSError as exc:
        raise click.BadParameter(
            f"cannot append to {path}: {exc.strerror or exc}", param_hint="'--stderr-log'"
        ) from None


def _session(bus: AgentBus, common: Common, options: ProcessOptions) -> tuple[Session, Deliverer | None]:
    """The agent's session (the stop signals passed on to it) and what delivers its directives."""
    session = Session(bus, options, asyncio.Event())
    _on_signals(session.forward)
    return session, _deliverer(common, _values(common, lambda: session.session_id), session.resume, bus)


async def _end(bus: AgentBus, session: Session, until_complete: bool) -> None:
    """With ``until_complete``, wait while the inbox resumes the agent until it completes; then let no
    resume command start any more."""
    if until_complete:
        while not bus.completed and not session.stop.is_set():
            await wait_for(bus.completion, 0.2)
        await session.finished()
        await session.stopped()
    session.stop.set()


@adapter.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD [ARG]...")
@click.option(
    "--until-complete",
    is_flag=True,
    help="After the agent exits without completing, keep resuming it (with --deliver command) until it "
    "completes.",
)
@click.option("--quiet", is_flag=True, help="Do not copy the agent's output to stdout.")
@click.option(
    "--stderr-log",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append the agent's stderr here (default: this command's stderr, as it is even with --log-json).",
)
@click.option(
    "--idle-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Create this file while the agent waits between two turns (--until-complete) for a blocking "
    "delegation request of its own, and remove it when the next turn starts; a launcher passes it, and "
    "lends the waiting agent's slot to its delegates meanwhile.",
)
@click.option("--started-fd", type=click.IntRange(min=0), hidden=True)  # agents.launch_marks
@common_options
@redis_options
def run(
    settings: Settings,
    common: Common,
    argv: tuple[str, ...],
    until_complete: bool,
    quiet: bool,
    stderr_log: Path | None,
    idle_file: Path | None,
    started_fd: int | None,
) -> None:
    """Run an agent command and publish what it prints; exit with its exit status.

    SIGTERM, SIGINT and SIGHUP are passed on to the agent (under nohup SIGHUP is ignored, by both). A
    non-zero exit without a completion report is published as a STOP_WORK error with the end of its
    stderr, unless the agent said in that turn that it waits (a STOP_WORK or a CLARIFICATION_NEEDED of
    its own) or its program that the turn failed (Codex CLI's turn.failed, a Claude Code error result:
    a STOP_WORK error with what it said). While Redis is unreachable, what the agent printed is kept and
    sent again until it is taken; a signal once the agent has exited (or a second signal, which also
    kills it) gives up instead: the adapter says on stderr what was not published and exits with 128 +
    the signal (130, 143, 129).

    \b
    Example (Claude Code, resumed with each directive until it completes):
      subagent-bus adapter run --agent-id auditor --group audit --session-id "$SID" --until-complete --deliver command:'claude --resume {session_id} -p {prompt}' -- claude --session-id "$SID" -p "$(subagent-bus prompt --agent-id auditor task.md)"
    """
    check_program(list(argv), "CMD")  # before anything is published: no blocker for a typo
    _check_until_complete(until_complete, common)
    if stderr_log is not None:
        _check_stderr_log(stderr_log)
    if started_fd is not None:  # the launcher's mark of this start: said started, before the agent starts
        try:
            adapter_started(started_fd)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--started-fd'") from None
        except OSError as exc:  # the agent matters more than the mark: started all the same
            click.echo(f"warning: cannot say in the launch mark that the agent started: {exc}", err=True)
    options = ProcessOptions(
        common.fmt,
        common.heartbeat_s,
        not quiet,
        stderr_log,
        common.task,
        common.name,
        common.session_id,
        until_complete=until_complete,
        idle_file=idle_file,
    )

    async def body(bus: AgentBus) -> int:
        session, deliverer = _session(bus, common, options)

        async def work() -> int:
            code = await session.run(list(argv))
            await _end(bus, session, until_complete)
            return code

        try:
            code = await with_inbox(
                bus, deliverer, work(), attempts=common.max_attempts, retry_ms=common.retry_ms
            )
            await session.finished()  # a resume the inbox started just before it stopped
        finally:
            session.ended()
        return session.last_code if session.last_code is not None else code

    raise SystemExit(serve(settings, common, body))


@adapter.command("stdin")
@click.option(
    "--until-complete",
    is_flag=True,
    help="After the end of input without completion, keep resuming the agent (with --deliver command) "
    "until it completes.",
)
@click.option("--quiet", is_flag=True, help="Do not copy the input to stdout.")
@common_options
@redis_options
def stdin(settings: Settings, common: Common, until_complete: bool, quiet: bool) -> None:
    """Publish what arrives on stdin (an agent's output piped in) until the end of input."""
    if sys.stdin is None:  # started with it closed (`<&-`)
        raise click.UsageError("stdin is closed: pipe the agent's output into it")
    _check_until_complete(until_complete, common)
    options = ProcessOptions(
        common.fmt,
        common.heartbeat_s,
        not quiet,
        None,
        common.task,
        common.name,
        common.session_id,
        until_complete=until_complete,
    )

    async def body(bus: AgentBus) -> int:
        session, deliverer = _session(bus, common, options)

        async def work() -> int:
            piped = asyncio.create_task(session.pipe(await stdin_chunks()))
            stopped = asyncio.create_task(session.stop.wait())
            await asyncio.wait({piped, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not piped.done():
                piped.cancel()
                await asyncio.wait({piped})
                if not piped.cancelled():
                    piped.result()  # it gave up publishing first
                await bus.flush()  # once more: on the server now, or given up and reported
                return 0  # what it read is published: an ordinary end, as `watch` stopped
            piped.result()  # a failure of the pipe's publishing is this command's failure
            await _end(bus, session, until_complete)
            return 0

        code = await with_inbox(
            bus, deliverer, work(), attempts=common.max_attempts, retry_ms=common.retry_ms
        )
        await session.finished()
        return session.last_code if session.last_code is not None and code == 0 else code

    raise SystemExit(serve(settings, common, body))


adapter.add_command(import_findings)


commands: list[click.Command] = [adapter]
