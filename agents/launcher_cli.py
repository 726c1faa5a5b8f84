"""``subagent-bus launcher``: the command around :class:`agents.launcher.Launcher`."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import click

from agents.delivery import DeliveryKind, DeliverySpec
from agents.launcher import Launcher, LauncherOptions, log
from agents.options import check_delivery, check_program
from agents.spawn import AGENT_FILE
from bus.cli_connection import redis_options, run_command
from bus.connection import connect
from bus.errors import ConfigError
from bus.keys import open_namespace
from bus.metrics import LauncherMetrics
from bus.ops import Ops, ops_options
from bus.params import MILLISECONDS, EnvOption, FiniteFloatRange, process_name
from bus.settings import Settings
from bus.stop_signals import handled_stop_signals

__all__ = ["launcher"]


def _template(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    try:
        return LauncherOptions.parse_template(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _adapter_args(
    deliver: str | None, workdir: Path | None, heartbeat_s: float | None, until_complete: bool
) -> tuple[str, ...]:
    args: list[str] = []
    if deliver is not None:
        try:
            spec = DeliverySpec.parse(deliver)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--deliver") from None
        if spec.kind is DeliveryKind.PRINT:
            raise click.BadParameter(
                "print would write each directive into the agent's log (an adapter's stdout goes there), "
                "where no agent reads it: give file:PATH or command:TEMPLATE, or leave --deliver out (the "
                "directives wait in the inbox for `subagent-bus listen`)",
                param_hint="'--deliver'",
            )
        if spec.path is not None and AGENT_FILE not in spec.path.name:
            raise click.BadParameter(
                f"file:{spec.path} would be one file for every agent the launcher starts, each reading "
                f"the others' directives: put {AGENT_FILE} in its name (file:directives/{AGENT_FILE}.md)",
                param_hint="'--deliver'",
            )
        check_delivery(spec)
        args += ["--deliver", deliver]
    if workdir is not None:
        args += ["--workdir", str(workdir.absolute())]
    if heartbeat_s is not None:
        args += ["--heartbeat", str(heartbeat_s)]
    if until_complete:
        if deliver is None or not deliver.startswith("command:"):
            raise click.UsageError("--until-complete needs --deliver command:... (a resume command)")
        args.append("--until-complete")
    return tuple(args)


def _adapter_url(_ctx: click.Context, _param: click.Parameter, url: str | None) -> str | None:
    """``--adapter-redis-url``, checked here: every adapter started with a URL it refuses would exit
    before it reported anything, and its agent would count as running until declared lost."""
    if url is not None:
        try:
            Settings.from_url(url)
        except ConfigError as exc:
            raise click.BadParameter(str(exc)) from None
    return url


def _make_directory(path: Path, option: str) -> None:
    """Make ``--prompt-dir`` or ``--log-dir`` when the launcher starts (once its other options passed):
    one it cannot write in would fail every request it reads, and dead-letter them all after
    ``--max-attempts``, work that others asked for."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.BadParameter(f"cannot make {path}: {exc.strerror or exc}", param_hint=option) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise click.BadParameter(f"cannot write in {path}", param_hint=option)


@click.command("launcher")
@click.option(
    "--command",
    "template",
    required=True,
    callback=_template,
    help="Agent command template; placeholders {agent_id} {group_id} {prompt_file} {prompt} "
    "{parent_agent_id} {request_id}. Split like a shell line, run without a shell.",
)
@click.option(
    "--max-parallel", default=4, show_default=True, type=click.IntRange(min=1), help="Agents running at once."
)
@click.option("--name", callback=process_name, help="Consumer name of this launcher (default: host and pid).")
@click.option(
    "--burst",
    is_flag=True,
    help="Exit once no request is left and every agent started has ended; exit status 1 if a request it "
    "read could not be started (dead-lettered).",
)
@click.option(
    "--prompt-dir",
    default=".subagent-bus/prompts",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where each agent's prompt file is written ({prompt_file}; also the adapter's --task-file).",
)
@click.option(
    "--log-dir",
    default=".subagent-bus/logs",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where each agent's adapter writes its log: AGENT_ID.log (an id with characters other than "
    "letters, digits, '-', '_' and '.' is made safe, and a hash of it added).",
)
@click.option(
    "--deliver",
    help="Passed to each agent's adapter (file:PATH or command:TEMPLATE; not print, whose output would "
    "go to the agent's log); a file:PATH names {agent_id} in its file name, each agent's own file.",
)
@click.option(
    "--workdir", type=click.Path(exists=True, file_okay=False, path_type=Path), help="Passed to each adapter."
)
@click.option("--heartbeat", "heartbeat_s", type=FiniteFloatRange(min=0.01), help="Passed to each adapter.")
@click.option("--until-complete", is_flag=True, help="Passed to each adapter (needs --deliver command:...).")
@click.option(
    "--max-attempts",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Start attempts per request.",
)
@click.option(
    "--reclaim-ms",
    default=30_000,
    show_default=True,
    type=MILLISECONDS,
    help="Idle time before another launcher's unstarted request is taken over.",
)
@click.option(
    "--adapter-redis-url",
    envvar="SUBAGENT_BUS_ADAPTER_REDIS_URL",
    cls=EnvOption,
    metavar="URL",
    callback=_adapter_url,
    help="URL for the adapters the launcher starts (e.g. with the adapter ACL user); "
    "default: the launcher's.",
)
@ops_options
@redis_options
def launcher(
    settings: Settings,
    ops: Ops,
    template: list[str],
    max_parallel: int,
    name: str | None,
    burst: bool,
    prompt_dir: Path,
    log_dir: Path,
    deliver: str | None,
    workdir: Path | None,
    heartbeat_s: float | None,
    until_complete: bool,
    max_attempts: int,
    reclaim_ms: int,
    adapter_redis_url: str | None,
) -> None:
    """Start the agents of launch requests (delegations, retries, resumed agents), each under an adapter.

    A request is acknowledged once its agent started, so it is started at least once: a launcher killed
    between the start and the acknowledgement leaves a request that is read again, which a launcher on
    the same --log-dir (its restart) does not start again (the request's mark there says it started) and
    one elsewhere does. SIGTERM, Ctrl-C or SIGHUP (its terminal closed; not under nohup) stops the agents
    this launcher started or adopted (those a killed launcher on its --log-dir left running), then the
    launcher; SIGKILL leaves them running.

    With --metrics-port it serves Prometheus metrics: task entries read (subagent_bus_entries_in), agents
    launched, launch failures and agents running. The adapters it starts do not inherit the port.

    \b
    Example (Claude Code agents, four at a time):
      subagent-bus launcher --command 'claude -p {prompt}' --max-parallel 4
    """
    check_program(template, "--command")
    ops.setup_logging()
    options = LauncherOptions(
        template=template,
        max_parallel=max_parallel,
        burst=burst,
        prompt_dir=prompt_dir,
        log_dir=log_dir,
        adapter_args=_adapter_args(deliver, workdir, heartbeat_s, until_complete),
        reclaim_idle_ms=reclaim_ms,
        max_attempts=max_attempts,
        adapter_url=adapter_redis_url,
        **({"name": name} if name else {}),
    )
    _make_directory(prompt_dir, "'--prompt-dir'")
    _make_directory(log_dir, "'--log-dir'")
    metrics = ops.serve(LauncherMetrics)

    async def main() -> Launcher:
        client = await connect(settings)
        try:
            keys = await open_namespace(client, settings.namespace, settings.shards)
            stop = asyncio.Event()
            launcher = Launcher(client, keys, settings, options, metrics)

            def signalled(sig: signal.Signals) -> None:
                if stop.is_set():  # again: an agent that ignores SIGTERM keeps its adapter waiting
                    log.warning("%s again: passed on again, so the adapters kill their agents", sig.name)
                    launcher.terminate()
                stop.set()

            loop = asyncio.get_running_loop()
            for sig in handled_stop_signals():
                loop.add_signal_handler(sig, signalled, sig)
            await launcher.run(stop)
            return launcher
        finally:
            await client.aclose()

    launcher = run_command(main())
    log.info("launcher %s: started %d agent(s)", options.name, launcher.launched)
    if burst and launcher.dead_lettered:
        log.error(
            "%d request(s) could not be started and were dead-lettered (`subagent-bus tail --stream dead`)",
            launcher.dead_lettered,
        )
        raise SystemExit(1)
