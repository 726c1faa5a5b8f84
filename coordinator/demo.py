"""``subagent-bus demo``: every protocol, end to end, with real processes on a local Redis.

It starts a coordinator, a launcher and three scripted agents (``agents/demo_agent.py``), each under an
adapter, as separate processes, then plays the human: it follows the decisions on the events stream and
answers the clarification, resolves the blocker and denies the low-priority delegation with the same CLI
commands a person would type. The security auditor's delegation is approved by policy and launched; the
dependency scanner fails and is retried once with a reduced scope; three reports of the same finding are
merged. The run ends with a summary, and fails (exit 1) if any protocol did not play out.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import click
import orjson

from bus.cli_connection import NAMESPACE_ENV, URL_ENV, redis_options, run_command
from bus.connection import Client, connect, translated
from bus.envelope import decode
from bus.errors import BusError, DecodeError
from bus.events import Decision, DecisionType
from bus.keys import Keys, StreamKind, open_namespace
from bus.params import FiniteFloatRange
from bus.settings import MAX_NAMESPACE_CHARS, Settings, redact
from bus.stop_signals import handled_stop_signals
from bus.stream_replies import stream_entries
from coordinator.policy import Policy
from coordinator.rules import GroupSummary, MergedFinding, merge_findings, summarize
from coordinator.view import iter_findings, load_groups

__all__ = ["DemoResult", "demo", "run_demo"]

GROUP: Final = "demo"
AGENTS: Final = (
    (
        "auditor",
        "security-auditor",
        "Audit the authentication module of the demo service for security issues",
    ),
    ("qa", "qa-engineer", "Write and run security tests for the demo service"),
    ("scanner", "dependency-scanner", "Scan the dependencies of the demo service for known vulnerabilities"),
)
EXPECTED: Final = frozenset(
    {
        DecisionType.QUESTION_ANSWERED,
        DecisionType.BLOCKER_RESOLVED,
        DecisionType.DELEGATION_APPROVED,
        DecisionType.LAUNCH_REQUESTED,
        DecisionType.DELEGATION_DENIED,
        DecisionType.RETRY_REQUESTED,
    }
)
"""The decisions a complete run must show, one per protocol the demo walks through."""


def _cli() -> list[str]:
    beside = Path(sys.executable).parent / "subagent-bus"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("subagent-bus")
    return [found] if found else [sys.executable, "-c", "from bus.cli import main; main()"]


def _agent_cmd(role: str, agent_id: str, extra: str = "") -> str:
    return f"{shlex.quote(sys.executable)} -m agents.demo_agent {role} --agent-id {agent_id} {extra}".strip()


@dataclass
class DemoResult:
    url: str
    namespace: str
    seconds: float = 0.0
    decisions: list[tuple[float, str, str, str]] = field(default_factory=list)
    human: list[str] = field(default_factory=list)
    summary: GroupSummary | None = None
    findings: list[MergedFinding] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def as_data(self) -> dict[str, Any]:
        return {
            "url": redact(self.url),
            "namespace": self.namespace,
            "seconds": round(self.seconds, 2),
            "ok": not self.problems,
            "problems": self.problems,
            "human_commands": self.human,
            "decisions": [
                {"at": round(at, 2), "agent_id": agent, "decision": kind, "detail": detail}
                for at, agent, kind, detail in self.decisions
            ],
            "group": self.summary.model_dump(mode="json") if self.summary else None,
            "merged_findings": [m.model_dump(mode="json") for m in self.findings],
        }


_ENV_PREFIX: Final = "SUBAGENT_BUS_"
_ENV_KEPT: Final = frozenset({"SUBAGENT_BUS_SOCKET_TIMEOUT"})
"""The demo's processes take their options from it, not from the environment: a metrics port, a policy
or an agent identity set there for a real bus would have them collide or play another script. The
socket timeout is the connection's, which a slow server may need."""
_SERVICES: Final = ("coordinator", "launcher")
"""The processes the demo cannot go on without (an adapter ends with its agent)."""


class _Demo:
    def __init__(self, url: str, namespace: str, workdir: Path, say: Callable[[str], None]) -> None:
        self.result = DemoResult(url=url, namespace=namespace)
        self.workdir = workdir
        self.say = say
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIX) or k in _ENV_KEPT}
        self.env = {**inherited, URL_ENV: url, NAMESPACE_ENV: namespace}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.started = time.monotonic()

    def spawn(self, name: str, args: list[str]) -> None:
        with (self.workdir / f"{name}.log").open("wb") as log:  # the child writes to its own copy
            self.processes[name] = subprocess.Popen(
                [*_cli(), *args], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def failed(self) -> list[str]:
        """What each process that exited with a failure status last wrote to its log."""
        found = []
        for name, process in self.processes.items():
            code = process.poll()
            if code:
                lines = (self.workdir / f"{name}.log").read_bytes().decode(errors="replace").splitlines()
                said = f": {lines[-1].strip()}" if lines else ""
                how = (
                    f"was killed by {signal.Signals(-code).name}"
                    if code < 0
                    else f"exited with status {code}"
                )
                found.append(f"{name} {how}{said} ({self.workdir / name}.log)")
        return found

    def service_gone(self) -> bool:
        """Whether the coordinator or the launcher has exited: nothing would play the rest out."""
        return any(self.processes[name].poll() is not None for name in _SERVICES)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.spawn("coordinator", ["coordinator", "--tick", "1"])
        launched = _agent_cmd("launched", "{agent_id}", "--prompt-file {prompt_file}")
        self.spawn("launcher", ["launcher", "--command", launched, "--max-parallel", "2",
                                "--prompt-dir", str(self.workdir / "prompts"), "--log-dir", str(self.workdir),
                                "--heartbeat", "1"])  # fmt: skip
        for agent_id, role, task in AGENTS:
            task_file = self.workdir / f"{agent_id}.task"
            task_file.write_text(task, encoding="utf-8")
            resume = "command:" + _agent_cmd(role, agent_id, "--prompt {prompt}")
            self.spawn(agent_id, ["adapter", "run", "--agent-id", agent_id, "--group", GROUP, "--name", role,
                                  "--task-file", str(task_file), "--quiet", "--until-complete", "--heartbeat", "1",
                                  "--deliver", resume, "--", *shlex.split(_agent_cmd(role, agent_id))])  # fmt: skip
        self.say(f"started a coordinator, a launcher and {len(AGENTS)} agents, each under an adapter")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=15)
            if process.poll() is None:
                process.kill()

    def human(self, *args: str) -> None:
        # what a human types to do it again: the demo's namespace is in this process's environment only
        line = " ".join(shlex.quote(a) for a in ["subagent-bus", *args, "--namespace", self.result.namespace])
        self.say(f"  human> {line}")
        self.result.human.append(line)
        done = subprocess.run([*_cli(), *args], env=self.env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            self.result.problems.append(f"`{line}` failed: {done.stderr.strip()}")

    def on_decision(self, agent_id: str, decision: Decision) -> None:
        at = time.monotonic() - self.started
        first = decision.detail.split("\n", 1)[0][:90]
        self.result.decisions.append((at, agent_id, decision.decision.value, decision.detail))
        self.say(f"{at:6.1f}s  {agent_id:22} {decision.decision.value:20} {first}")
        if decision.decision is DecisionType.QUESTION_OPENED:
            self.human("answer", agent_id, "Q1=Analyze both OAuth2 and JWT; both are in use.",
                       "Q2=Assume 3.0-beta; we are migrating to 3.x.")  # fmt: skip
        elif decision.decision is DecisionType.BLOCKER_OPENED:
            self.human("resolve", agent_id, "--resolution", "Ran npm install successfully")
        elif decision.decision is DecisionType.DELEGATION_PENDING and decision.request_id:
            self.human("deny", decision.request_id, "--reason", "Docs are out of scope for a security review",
                       "--alternative", "List the outdated endpoints in your report")  # fmt: skip


async def _follow(demo: _Demo, client: Client, keys: Keys, deadline: float) -> GroupSummary | None:
    stream = keys.stream(keys.shard_of(GROUP), StreamKind.EVENTS)
    cursor = "0"
    settled: GroupSummary | None = None
    done_at: float | None = None
    while time.monotonic() < deadline and not demo.service_gone():
        with translated():
            reply = await client.xread({stream: cursor}, count=100, block=None if settled else 250)
        entries = stream_entries(reply)
        if settled and not entries:
            return settled  # every decision up to the settling batch has been shown
        for entry_id, fields in entries:
            cursor = entry_id
            with contextlib.suppress(DecodeError):
                envelope = decode(fields.get(b"data"))
                if isinstance(envelope.payload, Decision):
                    await asyncio.to_thread(demo.on_decision, envelope.agent_id, envelope.payload)
        if settled is None and (found := await _settled(client, keys)) is not None:
            # The last agents' exits (AGENT_EXITED, no decision) follow their completion: wait for them,
            # so that the summary's applied counts are the final ones, unless one takes too long.
            summary, exited = found
            done_at = done_at or time.monotonic()
            if exited or time.monotonic() - done_at > _EXIT_GRACE_S:
                settled = summary
    return None


_EXIT_GRACE_S = 5.0


async def _settled(client: Client, keys: Keys) -> tuple[GroupSummary, bool] | None:
    """The group's summary once its work is done, and whether every agent's exit has been applied."""
    states = await load_groups(client, keys, GROUP)
    if not states:
        return None
    summary = summarize(states[0])
    done = summary.status is not None and summary.progress.active == 0 and not summary.pending_delegations
    if not done or summary.progress.total <= len(AGENTS):
        return None
    return summary, all(record.exited for record in states[0].agents.values())


def _check(result: DemoResult, workdir: Path) -> None:
    seen = {DecisionType(kind) for _, _, kind, _ in result.decisions}
    result.problems += [f"no {kind.value} decision" for kind in sorted(EXPECTED - seen)]
    if result.summary is None:
        result.problems.append(f"the group did not settle in time (see the logs in {workdir})")
    if not any(len(m.agents) >= 3 for m in result.findings):
        result.problems.append("no finding was reported by three agents")


_SUFFIX_CHARS: Final = len("-demo-") + 6
"""What the demo adds to the namespace it is given: ``-demo-`` and six hex digits of its own."""


def _stop(task: asyncio.Task[Any], sig: signal.Signals, stopped: list[signal.Signals]) -> None:
    stopped.append(sig)
    task.cancel()


async def run_demo(
    settings: Settings,
    *,
    seconds: float,
    workdir: Path,
    say: Callable[[str], None],
    stopped: list[signal.Signals],
) -> DemoResult:
    """Run the whole demo; the result lists problems instead of raising, so the summary always prints.

    SIGTERM or SIGHUP cancels it (what it started is stopped first); the signal is appended to ``stopped``.
    """
    # SIGTERM or SIGHUP (its terminal closed) would kill only this process and orphan every process it
    # started: cancel instead, so the `finally` below stops them (SIGINT does the same through
    # run_command). Not SIGHUP under nohup: the demo and its processes outlive the terminal.
    task = asyncio.current_task()
    if task is not None:
        for sig in handled_stop_signals():
            if sig is not signal.SIGINT:
                asyncio.get_running_loop().add_signal_handler(sig, _stop, task, sig, stopped)
    namespace = f"{settings.namespace}-demo-{uuid.uuid4().hex[:6]}"  # never a real bus's agents
    demo = _Demo(settings.url, namespace, workdir / namespace, say)
    say(f"subagent-bus demo: Redis {settings.display_url()}, namespace {namespace}")
    client = await connect(settings)
    try:
        keys = await open_namespace(client, namespace, settings.shards)
        demo.start()
        demo.result.summary = await _follow(demo, client, keys, time.monotonic() + seconds)
        found = [f async for _, f, _, _ in iter_findings(client, keys, GROUP)]
        demo.result.findings = merge_findings(found, Policy())
    except BusError as exc:
        demo.result.problems.append(str(exc))
    finally:
        failed = demo.failed()  # before stopping: an exit the stop causes is no failure
        demo.stop()
        await client.aclose()
    demo.result.seconds = time.monotonic() - demo.started
    _check(demo.result, demo.workdir)
    if demo.result.problems:
        demo.result.problems += failed
    return demo.result


def _print_summary(result: DemoResult, url_given: bool) -> None:
    echo = click.echo
    echo(f"\n== Agents (group {GROUP}, {result.seconds:.1f}s)")
    if result.summary:
        echo(f"  {'agent':26} {'kind':20} {'state':12} {'result':8} attempt  applied")
        for agent in result.summary.agents:
            status = agent.status.value if agent.status else "-"
            echo(
                f"  {agent.agent_id:26} {agent.name or '-':20} {agent.state.value:12} {status:8} "
                f"{agent.attempt:>7}  {agent.applied:>7}"
            )
    counts: dict[str, int] = {}
    for _, _, kind, _ in result.decisions:
        counts[kind] = counts.get(kind, 0) + 1
    echo(f"\n== Decisions ({len(result.decisions)})")
    echo("  " + ", ".join(f"{kind} x{n}" for kind, n in sorted(counts.items())))
    echo("\n== Human commands the demo typed")
    for line in result.human:
        echo(f"  {line}")
    echo(f"\n== Merged findings ({len(result.findings)})")
    echo(f"  {'location':24} {'cat':5} {'severity':20} {'conf':>6}  agents")
    for m in result.findings:
        conf = f"{m.confidence:.1f}" if m.confidence is not None else "-"
        flag = "  (severity conflict: human review)" if m.severity_conflict else ""
        severities = "/".join(s.value for s in m.severities) or "-"
        echo(f"  {m.location:24} {m.category:5} {severities:20} {conf:>6}  {', '.join(m.agents)}{flag}")
    if result.problems:
        echo("\nPROBLEMS:\n  " + "\n  ".join(result.problems))
    else:
        # a URL given on the command line is not what a bare `status` would reach
        where = f"--redis-url {shlex.quote(redact(result.url))} " if url_given else ""
        echo(
            f"\nEvery protocol played out. Explore: subagent-bus status {where}--namespace {result.namespace}"
        )


def _usable_directory(ctx: click.Context, param: click.Parameter, value: Path) -> Path:
    """The directory, created if need be, or a usage error (before a local server is started)."""
    try:
        value.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.BadParameter(f"cannot create {value}: {exc.strerror or exc}") from None
    return value


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as one JSON document.")
@click.option(
    "--timeout",
    type=FiniteFloatRange(min=0, min_open=True),
    default=120.0,
    show_default=True,
    help="Seconds before the demo gives up.",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".subagent-bus/demo"),
    show_default=True,
    callback=_usable_directory,
    help="Where the agents' prompts and logs go.",
)
@redis_options
def demo(settings: Settings, as_json: bool, timeout: float, workdir: Path) -> None:
    """Walk through every protocol with real processes: a coordinator, a launcher, three agents.

    A clarification is answered, a blocker resolved, one delegation approved and launched, one denied,
    a failed agent retried once, and three overlapping security reports merged. Live decisions are
    shown as they happen; exit status 1 if any step did not happen. It plays in a namespace of its own,
    NAMESPACE-demo- and six hex digits (sbus-demo-1a2b3c), which its last line names.
    """
    longest = MAX_NAMESPACE_CHARS - _SUFFIX_CHARS
    if len(settings.namespace) > longest:  # before any process starts, each to refuse it
        raise click.BadParameter(
            f"at most {longest} characters for the demo, which adds '-demo-' and six hex digits",
            param_hint="'--namespace'",
        )
    say = (lambda _line: None) if as_json else click.echo
    stopped: list[signal.Signals] = []
    try:
        result = run_command(run_demo(settings, seconds=timeout, workdir=workdir, say=say, stopped=stopped))
    except asyncio.CancelledError:  # SIGTERM or SIGHUP: every process it started is stopped
        sys.exit(128 + (stopped[0] if stopped else signal.SIGTERM))
    if as_json:
        click.echo(orjson.dumps(result.as_data(), option=orjson.OPT_INDENT_2).decode())
    else:
        source = click.get_current_context().get_parameter_source("redis_url")
        _print_summary(result, url_given=source is click.core.ParameterSource.COMMANDLINE)
    if result.problems:
        sys.exit(1)
