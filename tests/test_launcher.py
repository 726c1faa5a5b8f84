"""The launcher: launch requests become agents under adapters, never more than --max-parallel at once."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
from dataclasses import replace
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path

import pytest
from adapter_kit import CLI, Bus, exited, fake, logged, open_bus, run_ok, start, stream_fields, wait_until

from agents import launch_refusals
from agents.launcher import Launcher, LauncherOptions, file_stem
from agents.orphans import Proc
from agents.spawn import Spawner
from bus.directives import DelegationApproved, LaunchReason, LaunchRequest
from bus.envelope import EnvelopeType, decode, new_envelope
from bus.errors import CommandFailed
from bus.events import AgentStarted, Heartbeat
from bus.keys import StreamKind, dead_stream_for
from bus.publisher import Publisher
from bus.settings import Settings
from bus.signals import StopWork

T = EnvelopeType
GROUP = "g-launch"


async def request(bus: Bus, n: int, group: str = GROUP, expires_at: datetime | None = None) -> str:
    agent = f"agent-{n}"
    launch = LaunchRequest(
        request_id=f"req-{n}",
        new_agent_id=agent,
        reason=LaunchReason.DELEGATION,
        task=f"Task number {n}: scan module {n} for secrets",
        context="See AUTH_ANALYSIS.md",
        expires_at=expires_at,
    )
    await Publisher(bus.client, bus.keys).publish(
        new_envelope(launch, agent_id=agent, group_id=group), StreamKind.TASKS
    )
    return agent


def launcher_args(tmp_path: Path, template: str, *extra: str) -> list[str]:
    return [
        "launcher",
        "--command",
        template,
        "--prompt-dir",
        str(tmp_path / "prompts"),
        "--log-dir",
        str(tmp_path / "logs"),
        *extra,
    ]


def template(*steps: str, **options: str) -> str:
    argv = fake(*steps, agent_id="{agent_id}", prompt_file="{prompt_file}", **options)
    return " ".join(argv)


def max_overlap(record: Path) -> int:
    events = []
    for row in record.read_text().splitlines():
        kind, at, _ = row.split()
        events.append((float(at), 1 if kind == "start" else -1))
    running = peak = 0
    for _, change in sorted(events, key=lambda e: (e[0], e[1])):
        running += change
        peak = max(peak, running)
    return peak


async def test_five_requests_two_at_a_time(redis_url: str, tmp_path: Path) -> None:
    record, go = tmp_path / "record", tmp_path / "go"
    async with open_bus(redis_url) as bus:
        agents = [await request(bus, n) for n in range(5)]
        log = tmp_path / "launcher.log"
        tpl = template(f"wait-file:{go}", "sleep:0.1", "complete", record=str(record))
        launcher = start(launcher_args(tmp_path, tpl, "--max-parallel", "2", "--burst"), redis_url, log)

        async def two_running() -> bool:
            return record.exists() and record.read_text().count("start") == 2

        await wait_until(two_running, 30, "two agents to start")
        [info] = await bus.client.xinfo_groups(bus.stream(GROUP, StreamKind.TASKS))
        assert (info["pending"], info["lag"]) == (0, 3)  # two started and acknowledged, three not read
        go.touch()
        assert await exited(launcher, 60) == 0, log.read_text()
        assert max_overlap(record) == 2  # parallel, and never more than two
        assert record.read_text().count("start") == 5
        completions = await bus.of_type(GROUP, T.COMPLETION_REPORT)
        assert sorted(e.agent_id for e in completions) == agents
        started = {e.agent_id: e.payload for e in await bus.of_type(GROUP, T.AGENT_STARTED)}
        assert sorted(started) == agents
        first = started["agent-0"]
        assert isinstance(first, AgentStarted)
        assert first.task is not None
        assert first.task.startswith("## EXECUTION CONTEXT: BACKGROUND SUBAGENT")
        assert "**Your Agent ID:** agent-0" in first.task
        assert first.task.endswith(
            "## YOUR TASK\nTask number 0: scan module 0 for secrets\n\n## CONTEXT\nSee AUTH_ANALYSIS.md\n"
        )
        assert (tmp_path / "prompts" / "agent-0.md").read_text() == first.task
        tasks = bus.stream(GROUP, StreamKind.TASKS)
        assert (await bus.client.xpending(tasks, "launchers"))["pending"] == 0
    assert "started 5 agent(s)" in log.read_text()


async def test_a_tasks_stream_lost_with_its_group_is_followed_again(redis_url: str, tmp_path: Path) -> None:
    # a server restarted without its data (or failed over before it replicated the group): NOGROUP
    log = tmp_path / "launcher.log"
    launcher = start(launcher_args(tmp_path, template("complete")), redis_url, log)
    try:
        async with open_bus(redis_url) as bus:
            tasks = bus.stream(GROUP, StreamKind.TASKS)

            async def following() -> bool:
                groups = await bus.client.xinfo_groups(tasks) if await bus.client.exists(tasks) else []
                return any(g["name"] == b"launchers" for g in groups)

            await request(bus, 1)
            await wait_until(lambda: bus.has(GROUP, T.COMPLETION_REPORT), 30, "the first agent")
            await bus.client.delete(tasks)
            await wait_until(logged(log, "creating the consumer group again"), 30, "NOGROUP")
            await wait_until(following, 30, "the group made again")
            agent = await request(bus, 2)
            await wait_until(lambda: bus.has(GROUP, T.COMPLETION_REPORT, 2), 30, "the second agent")
            assert [e.agent_id for e in await bus.of_type(GROUP, T.COMPLETION_REPORT)][-1] == agent
        assert launcher.poll() is None, log.read_text()
    finally:
        launcher.terminate()
        assert await exited(launcher, 30) == 0, log.read_text()


async def two_sessions(bus: Bus, agent_id: str) -> str:
    """Two resume launch requests for one agent (as a relaunch whose previous adapter still ends makes);
    the entry id of the second."""
    sent = ""
    for n in (1, 2):
        launch = LaunchRequest(
            request_id=f"req-{agent_id}-{n}", new_agent_id=agent_id, reason=LaunchReason.RESUME, task="t"
        )
        envelope = new_envelope(launch, agent_id=agent_id, group_id=GROUP)
        sent = await Publisher(bus.client, bus.keys).publish(envelope, StreamKind.TASKS)
    return sent


async def test_an_agent_started_again_while_its_previous_adapter_still_ends_is_started_once_it_ended(
    redis_url: str, tmp_path: Path
) -> None:
    # a resume launch request names the agent id of the previous one, whose adapter may still be ending;
    # its request is held meanwhile: with a --reclaim-ms shorter than the wait, left idle, it was claimed
    # back again and again until dead-lettered for its deliveries, then started all the same
    go, record = tmp_path / "go", tmp_path / "record"
    tpl = template(f"wait-file:{go}", "complete", record=str(record))
    async with open_bus(redis_url) as bus:
        sent = await two_sessions(bus, "again")
        log = tmp_path / "launcher.log"
        extra = ("--burst", "--reclaim-ms", "300", "--max-attempts", "2")
        launcher = start(launcher_args(tmp_path, tpl, *extra), redis_url, log)

        async def waited_past_reclaims() -> bool:  # ten reclaim times after the requests were sent
            seconds, micros = await bus.client.time()
            return seconds * 1000 + micros // 1000 - int(sent.split("-")[0]) > 3000

        await wait_until(waited_past_reclaims, 30, "three seconds to go by")
        go.touch()
        assert await exited(launcher, 60) == 0, log.read_text()
        assert await bus.client.xlen(bus.stream(GROUP, StreamKind.DEAD)) == 0
    assert record.read_text().count("start") == 2
    assert "started 2 agent(s)" in log.read_text()


async def test_an_agent_and_a_group_named_like_the_end_of_options_are_launched(
    redis_url: str, tmp_path: Path
) -> None:
    # the adapter's command line holds them as option values: the agent's command is not found by a "--"
    record = tmp_path / "record"
    async with open_bus(redis_url) as bus:
        launch = LaunchRequest(
            request_id="req-dashes", new_agent_id="--", reason=LaunchReason.DELEGATION, task="t"
        )
        await Publisher(bus.client, bus.keys).publish(
            new_envelope(launch, agent_id="--", group_id="--"), StreamKind.TASKS
        )
        log = tmp_path / "launcher.log"
        # the stand-in agent's own parser takes "--" for the end of options: the id as "--agent-id=--"
        tpl = template("complete", record=str(record)).replace(
            "--agent-id {agent_id}", "--agent-id={agent_id}"
        )
        launcher = start(launcher_args(tmp_path, tpl, "--burst"), redis_url, log)
        assert await exited(launcher, 60) == 0, log.read_text()
    assert record.read_text().count("start") == 1


async def test_requests_beyond_the_limit_stay_unread_for_any_launcher(redis_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    tpl = template(f"wait-file:{go}", "complete")
    async with open_bus(redis_url) as bus:
        agents = [await request(bus, n) for n in range(5)]
        log = tmp_path / "launcher.log"
        first = start(launcher_args(tmp_path, tpl, "--max-parallel", "1", "--name", "one"), redis_url, log)

        async def one_started() -> bool:
            return await bus.count(GROUP, T.AGENT_STARTED) == 1

        await wait_until(one_started, 30, "the first agent")
        tasks = bus.stream(GROUP, StreamKind.TASKS)
        [info] = await bus.client.xinfo_groups(tasks)
        assert info["pending"] == 0  # acknowledged once started
        assert info["lag"] == 4  # the others were never read
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        go.touch()
        second = start(launcher_args(tmp_path, tpl, "--max-parallel", "2", "--burst"), redis_url, log)
        assert await exited(second, 60) == 0, log.read_text()

        async def all_completed() -> bool:
            return await bus.count(GROUP, T.COMPLETION_REPORT) == 5

        await wait_until(
            all_completed, 30, "every agent to complete"
        )  # the first one's adapter outlived its launcher
        started = [e.agent_id for e in await bus.of_type(GROUP, T.AGENT_STARTED)]
        assert sorted(started) == agents  # each started exactly once


async def killed_with_an_agent_running(redis_url: str, tmp_path: Path, tpl: str) -> None:
    """A launcher started agent-0 (its record in ``record``) and was killed with SIGKILL, leaving it running."""
    record = tmp_path / "record"
    first = start(launcher_args(tmp_path, tpl, "--max-parallel", "1"), redis_url, tmp_path / "first.log")

    async def one_started() -> bool:
        return record.exists() and record.read_text().count("start") == 1

    await wait_until(one_started, 30, "the first agent")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    assert [p.name for p in (tmp_path / "logs").glob("*.pid")] == ["agent-0.pid"]


async def adopting(tmp_path: Path, tpl: str, redis_url: str, *extra: str) -> subprocess.Popen[bytes]:
    """A launcher (its log in ``second.log``) that adopted the agent the killed one left running."""
    log = tmp_path / "second.log"
    launcher = start(launcher_args(tmp_path, tpl, "--max-parallel", "1", *extra), redis_url, log)

    async def adopted() -> bool:
        return "adopted agent-0" in log.read_text()

    await wait_until(adopted, 30, "the second launcher to adopt the first one's agent")
    return launcher


async def test_a_launcher_after_one_killed_counts_the_agents_it_left_running(
    redis_url: str, tmp_path: Path
) -> None:
    record, go, log = tmp_path / "record", tmp_path / "go", tmp_path / "second.log"
    tpl = template(f"wait-file:{go}", "complete", record=str(record))
    async with open_bus(redis_url) as bus:
        agents = [await request(bus, n) for n in range(3)]
        await killed_with_an_agent_running(redis_url, tmp_path, tpl)
        second = await adopting(tmp_path, tpl, redis_url, "--burst")
        go.touch()
        assert await exited(second, 60) == 0, log.read_text()
        assert max_overlap(record) == 1  # the second launcher waited for the agent the first one left
        assert sorted(e.agent_id for e in await bus.of_type(GROUP, T.COMPLETION_REPORT)) == agents
        assert "adopted agent agent-0 ended" in log.read_text()
    assert not list((tmp_path / "logs").glob("*.pid"))


async def test_stopping_a_launcher_stops_the_agents_it_adopted(redis_url: str, tmp_path: Path) -> None:
    record, log = tmp_path / "record", tmp_path / "second.log"
    tpl = template(f"wait-file:{tmp_path / 'never'}", "complete", record=str(record))
    async with open_bus(redis_url) as bus:
        for n in range(3):
            await request(bus, n)
        await killed_with_an_agent_running(redis_url, tmp_path, tpl)
        second = await adopting(tmp_path, tpl, redis_url)
        second.send_signal(signal.SIGTERM)
        assert await exited(second, 60) == 0, log.read_text()
        [stop] = [e.payload for e in await bus.of_type(GROUP, T.STOP_WORK)]
        assert isinstance(stop, StopWork)
        assert f"killed by signal {int(signal.SIGTERM)}" in stop.details
        assert record.read_text().count("start") == 1
    assert not list((tmp_path / "logs").glob("*.pid"))


async def test_a_launcher_stopped_as_it_launches_leaves_the_agent_blocked_not_running(
    redis_url: str, tmp_path: Path
) -> None:
    """SIGTERM the moment an adapter was started, before it handles signals: it is told once it does,
    and reports the agent stopped (a blocker, for recover) instead of dying unheard while the agent
    looks running until declared lost."""
    log = tmp_path / "launcher.log"
    tpl = template(f"wait-file:{tmp_path / 'never'}", "complete")
    async with open_bus(redis_url) as bus:
        agent = await request(bus, 0)
        launcher = start(launcher_args(tmp_path, tpl), redis_url, log)

        async def launched() -> bool:
            return f"launched {agent}" in log.read_text()

        await wait_until(launched, 60, "the launch")
        launcher.send_signal(signal.SIGTERM)
        assert await exited(launcher, 60) == 0, log.read_text()
        assert f"agent {agent} ended with exit status 143" in log.read_text()
        [stop] = [e.payload for e in await bus.of_type(GROUP, T.STOP_WORK)]
        assert isinstance(stop, StopWork) and stop.agent_id == agent
        assert "SIGTERM stopped the adapter before it started the agent" in stop.details or (
            f"killed by signal {int(signal.SIGTERM)}" in stop.details
        ), stop.details
        assert [e.agent_id for e in await bus.of_type(GROUP, T.AGENT_EXITED)] == [agent]


async def test_a_closed_terminal_stops_a_launcher_as_sigterm_does(redis_url: str, tmp_path: Path) -> None:
    """SIGHUP: the launcher's agents run in sessions of their own, which its terminal's SIGHUP does not
    reach, so it passes the stop on to their adapters rather than die and leave them running."""
    log = tmp_path / "launcher.log"
    tpl = template(f"wait-file:{tmp_path / 'never'}", "complete")
    async with open_bus(redis_url) as bus:
        agent = await request(bus, 0)
        # Started as from a terminal: a suite run under `nohup` would hand it a SIGHUP it is to keep ignoring.
        launcher = start(
            launcher_args(tmp_path, tpl),
            redis_url,
            log,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
        )
        await wait_until(lambda: bus.has(GROUP, T.AGENT_STARTED), 60, "the agent to start")
        launcher.send_signal(signal.SIGHUP)
        assert await exited(launcher, 60) == 0, log.read_text()
        assert f"agent {agent} ended with exit status 143" in log.read_text()
        [stop] = [e.payload for e in await bus.of_type(GROUP, T.STOP_WORK)]
        assert isinstance(stop, StopWork) and stop.agent_id == agent
        assert f"killed by signal {int(signal.SIGTERM)}" in stop.details, stop.details
        assert [e.agent_id for e in await bus.of_type(GROUP, T.AGENT_EXITED)] == [agent]
    assert not list((tmp_path / "logs").glob("*.pid"))


async def test_a_request_read_by_a_launcher_that_died_is_taken_over(redis_url: str, tmp_path: Path) -> None:
    async with open_bus(redis_url) as bus:
        agent = await request(bus, 7)
        tasks = bus.stream(GROUP, StreamKind.TASKS)
        await bus.client.xgroup_create(tasks, "launchers", id="0")
        # a launcher read it, then died before starting its agent
        taken = await bus.client.xreadgroup("launchers", "dead-launcher", {tasks: ">"}, count=1)
        assert taken
        log = tmp_path / "launcher.log"
        launcher = start(
            launcher_args(tmp_path, template("complete"), "--burst", "--reclaim-ms", "200"), redis_url, log
        )
        assert await exited(launcher, 60) == 0, log.read_text()
        assert [e.agent_id for e in await bus.of_type(GROUP, T.COMPLETION_REPORT)] == [agent]
        assert (await bus.client.xpending(tasks, "launchers"))["pending"] == 0


async def test_a_delegation_is_launched(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "log"
    parent = start(
        [
            "adapter",
            "run",
            "--agent-id",
            "parent-1",
            "--group",
            GROUP,
            "--quiet",
            "--",
            *fake("delegate", "complete", agent_id="parent-1"),
        ],
        redis_url,
        log,
    )
    assert await exited(parent, 30) == 0
    await run_ok([CLI, "coordinator", "--burst", "--redis-url", redis_url])
    launcher = start(launcher_args(tmp_path, template("complete"), "--burst"), redis_url, log)
    assert await exited(launcher, 60) == 0, log.read_text()
    async with open_bus(redis_url) as bus:
        inbox = await stream_fields(bus.client, bus.inbox(GROUP, "parent-1"))
        [directive] = [decode(fields[b"data"]).payload for fields in inbox]
        assert isinstance(directive, DelegationApproved)
        delegate = directive.new_agent_id
        completions = [e.agent_id for e in await bus.of_type(GROUP, T.COMPLETION_REPORT)]
        assert completions == ["parent-1", delegate]
        [started] = [e.payload for e in await bus.of_type(GROUP, T.AGENT_STARTED) if e.agent_id == delegate]
        assert isinstance(started, AgentStarted)
        assert started.task is not None
        assert "Refactor the authentication module" in started.task


async def test_a_parent_waiting_for_its_blocking_delegate_gives_it_its_slot(
    redis_url: str, tmp_path: Path
) -> None:
    # one slot; the parent delegates work it waits for, and is resumed (--until-complete) with the
    # delegate's results: the delegate can only run in the slot of the parent, which waits meanwhile
    log, record = tmp_path / "log", tmp_path / "record"
    tpl = shlex.join(
        fake(
            "unless-prompt:Refactor the authentication=delegate:blocks_current_work",
            "unless-prompt:scan module=complete",
            agent_id="{agent_id}",
            prompt_file="{prompt_file}",
            record=record,
        )
    )
    resume = shlex.join(
        fake("if-prompt:DELEGATED WORK COMPLETE=complete", agent_id="{agent_id}", resumed="{prompt}")
    )
    coordinator = start(["coordinator", "--name", "c1"], redis_url, log)
    launcher = start(
        launcher_args(
            tmp_path, tpl, "--max-parallel", "1", "--until-complete", "--deliver", f"command:{resume}"
        ),
        redis_url,
        log,
    )
    try:
        async with open_bus(redis_url) as bus:
            parent = await request(bus, 1)

            async def both_completed() -> bool:
                return len(await bus.of_type(GROUP, T.COMPLETION_REPORT)) == 2

            await wait_until(both_completed, 60, "the parent and its delegate to complete")
            # the parent last: it completes only when resumed with its delegate's results
            [delegate, last] = [e.agent_id for e in await bus.of_type(GROUP, T.COMPLETION_REPORT)]
            assert (last, delegate != parent) == (parent, True)
        launcher.send_signal(signal.SIGTERM)
        assert await exited(launcher, 60) == 0, log.read_text()
        assert not list((tmp_path / "logs").glob("*.idle"))
    finally:
        coordinator.terminate()
        await exited(coordinator, 30)


def test_a_bad_template_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [CLI, "launcher", "--command", "agent --id {agentid}", "--redis-url", "redis://127.0.0.1:1"],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 2
    assert b"unknown placeholder {agentid}" in done.stderr


def test_an_adapter_url_the_adapters_would_refuse_is_a_usage_error() -> None:
    # else every adapter exits at once, before it reports anything, and nothing says so on the bus
    launch = [CLI, "launcher", "--command", "agent", "--redis-url", "redis://127.0.0.1:1"]
    done = subprocess.run(launch, env={**os.environ, "SUBAGENT_BUS_ADAPTER_REDIS_URL": "http://u:pw@h:1"},
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--adapter-redis-url" in done.stderr and "unsupported URL scheme 'http'" in done.stderr
    assert "pw" not in done.stderr


async def test_requests_that_cannot_start_or_are_not_requests_are_dead_lettered(
    redis_url: str, tmp_path: Path
) -> None:
    prompts = tmp_path / "prompts"
    async with open_bus(redis_url) as bus:
        agent = await request(bus, 0)
        (prompts / f"{file_stem(agent)}.md").mkdir(parents=True)  # its prompt file cannot be written
        tasks = bus.stream(GROUP, StreamKind.TASKS)
        await Publisher(bus.client, bus.keys).publish(
            new_envelope(Heartbeat(pid=1), agent_id="x", group_id=GROUP), StreamKind.TASKS
        )
        await bus.client.xadd(tasks, {"data": b"{not json"})
        log = tmp_path / "launcher.log"
        # every start attempt fails
        args = [
            "launcher", "--command", template("complete"), "--prompt-dir", str(prompts),
            "--log-dir", str(tmp_path / "logs"), "--max-attempts", "2", "--reclaim-ms", "50", "--burst",
        ]  # fmt: skip
        launcher = start(args, redis_url, log)
        assert await exited(launcher, 60) == 1, log.read_text()  # a burst that dead-lettered requests
        dead = await stream_fields(bus.client, dead_stream_for(tasks))
        [info] = await bus.client.xinfo_groups(tasks)
    reasons = sorted(fields[b"reason"].decode() for fields in dead)
    assert len(reasons) == 3, reasons
    assert reasons[0] == "HEARTBEAT is not a launch request"
    assert reasons[1].startswith(f"cannot start agent {agent}: ") and "Is a directory" in reasons[1]
    assert reasons[2].startswith("not JSON: ")
    assert {int(fields[b"deliveries"]) for fields in dead if b"cannot start" in fields[b"reason"]} == {2}
    assert info["pending"] == 0
    assert log.read_text().count(f"cannot start agent {agent}") == 2  # one warning per attempt
    assert "3 request(s) could not be started and were dead-lettered" in log.read_text()


@pytest.mark.parametrize("option", ["--prompt-dir", "--log-dir"])
async def test_a_directory_the_launcher_cannot_make_is_a_usage_error_not_dead_letters(
    redis_url: str, tmp_path: Path, option: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    async with open_bus(redis_url) as bus:
        await request(bus, 0)
        log = tmp_path / "launcher.log"
        args = [*launcher_args(tmp_path, template("complete"), "--burst"), option, str(blocker / "dir")]
        assert await exited(start(args, redis_url, log), 60) == 2
        tasks = bus.stream(GROUP, StreamKind.TASKS)
        assert await bus.client.xlen(dead_stream_for(tasks)) == 0
        assert not await bus.client.xinfo_groups(tasks)  # nothing read: the request waits for a launcher
    assert f"Invalid value for '{option}': cannot make {blocker / 'dir'}: Not a directory" in log.read_text()


async def test_a_request_read_after_it_expired_is_dead_lettered_and_not_started(
    redis_url: str, tmp_path: Path
) -> None:
    # the coordinator declares a launched agent that it has not heard from lost when the request
    # expires, and retries it: started later, it would run beside its retry
    now = datetime.now(UTC)
    record = tmp_path / "record"
    async with open_bus(redis_url) as bus:
        stale = await request(bus, 1, expires_at=now - timedelta(seconds=1))
        fresh = await request(bus, 2, expires_at=now + timedelta(hours=1))
        log = tmp_path / "launcher.log"
        launcher = start(
            launcher_args(tmp_path, template("complete", record=str(record)), "--burst"), redis_url, log
        )
        assert await exited(launcher, 60) == 1, log.read_text()  # one request not started
        tasks = bus.stream(GROUP, StreamKind.TASKS)
        [dead] = await stream_fields(bus.client, dead_stream_for(tasks))
        started = {e.agent_id for e in await bus.of_type(GROUP, T.AGENT_STARTED)}
    assert started == {fresh}
    assert len(record.read_text().splitlines()) == 2  # one start and one end: the fresh request's only
    reason = dead[b"reason"].decode()
    assert (
        reason.startswith("launch request req-1 expired at ")
        and f"its agent {stale} was not started" in reason
    )
    assert reason in log.read_text()


def test_file_names_of_distinct_agents_are_distinct() -> None:
    # prompts, logs and pid files are named after agents (the launcher's and the Task hook's)
    names = ["agent-7", "a/b", "a_b", "a\\b", "..hidden", "é"]
    stems = [file_stem(name) for name in names]
    assert len(set(stems)) == len(names)
    assert stems[0] == "agent-7" and stems[5] == "é"
    assert all("/" not in stem and "\\" not in stem and not stem.startswith(".") for stem in stems)


def test_a_file_name_of_the_longest_agent_id_fits_the_file_system_s_limit(tmp_path: Path) -> None:
    """Cut by characters, 90 of three bytes each made a name the file system refused (255 bytes)."""
    for agent in ("审" * 256, "x" * 256, "é" * 200 + "/"):
        stem = file_stem(agent)
        assert len(f"{stem}.prompt.md".encode()) <= 255, agent
        (tmp_path / f"{stem}.prompt.md").write_text("a task")


async def test_a_second_signal_stops_a_launcher_whose_agent_ignores_sigterm(
    redis_url: str, tmp_path: Path
) -> None:
    """The first SIGTERM reaches the agent, which goes on; the second has its adapter kill it."""
    stubborn, heard = tmp_path / "stubborn.sh", tmp_path / "heard"
    stubborn.write_text(
        f"trap 'echo term >> {heard}' TERM\necho started > {tmp_path / 'up'}\nwhile true; do sleep 0.1; done\n"
    )
    log = tmp_path / "launcher.log"
    async with open_bus(redis_url) as bus:
        agent = await request(bus, 0)
        launcher = start(launcher_args(tmp_path, f"sh {stubborn} {{agent_id}}"), redis_url, log)

        async def up() -> bool:
            return (tmp_path / "up").exists()

        async def signalled() -> bool:
            return heard.exists()

        await wait_until(up, 60, "the agent to start")
        launcher.send_signal(signal.SIGTERM)
        await wait_until(signalled, 30, "the agent to be told")
        assert launcher.poll() is None  # it waits for the agent, which goes on
        launcher.send_signal(signal.SIGTERM)
        assert await exited(launcher, 30) == 0, log.read_text()
    text = log.read_text()
    assert "SIGTERM again: passed on again" in text
    assert f"agent {agent} ended with exit status" in text


@pytest.mark.parametrize("gone", ["program", "workdir", "placeholder", "resume", "answers"])
async def test_a_command_the_adapter_would_refuse_is_a_start_that_failed(
    redis_url: str, tmp_path: Path, gone: str
) -> None:
    """A program removed while the launcher runs (being reinstalled), one given by a placeholder that is no
    program, a --workdir, the --deliver command's program or its file's directory removed: tried again, then dead-lettered, not taken for started while the
    adapter refused it (it exits before it reports anything)."""
    program = tmp_path / "agent-bin.sh"
    program.write_text("echo hi\n")
    program.chmod(0o755)
    workdir = tmp_path / "work"
    workdir.mkdir()
    resume = tmp_path / "resume.sh"
    resume.write_text("echo hi\n")
    resume.chmod(0o755)
    answers = tmp_path / "answers"
    answers.mkdir()
    deliver = f"file:{answers}/{{agent_id}}.md" if gone == "answers" else f"command:{resume} {{prompt}}"
    command = "{prompt_file} {agent_id}" if gone == "placeholder" else f"{program} {{agent_id}}"
    log = tmp_path / "launcher.log"
    args = [
        *launcher_args(tmp_path, command),
        *("--max-attempts", "2", "--reclaim-ms", "50", "--workdir", str(workdir)),
        *("--deliver", deliver),
    ]
    async with open_bus(redis_url) as bus:
        tasks = bus.stream(GROUP, StreamKind.TASKS)
        launcher = start(args, redis_url, log)

        async def reading() -> bool:
            return bool(await bus.client.exists(tasks)) and bool(await bus.client.xinfo_groups(tasks))

        await wait_until(reading, 60, "the launcher to read the tasks")
        if gone == "program":
            program.unlink()
        elif gone == "workdir":
            workdir.rmdir()
        elif gone == "resume":
            resume.unlink()
        elif gone == "answers":
            answers.rmdir()
        agent = await request(bus, 0)

        async def dead_lettered() -> bool:
            return bool(await stream_fields(bus.client, dead_stream_for(tasks)))

        await wait_until(dead_lettered, 60, "the request to be dead-lettered")
        [dead] = await stream_fields(bus.client, dead_stream_for(tasks))
        launcher.send_signal(signal.SIGTERM)
        assert await exited(launcher, 60) == 0, log.read_text()
    why = {
        "program": f"{program} is not an executable file",
        "workdir": f"the --workdir {workdir} is no directory",
        "placeholder": f"{tmp_path / 'prompts' / agent}.md is not an executable file",
        "resume": f"{resume} is not an executable file",
        "answers": f"the directory of {answers / agent}.md does not exist",
    }[gone]
    assert dead[b"reason"].decode() == f"cannot start agent {agent}: {why}"
    assert f"launched {agent}" not in log.read_text()
    assert not (tmp_path / "prompts" / f"{agent}.md").exists()  # nothing left of a start refused


def test_a_file_delivery_is_one_file_per_agent(tmp_path: Path) -> None:
    """Every launched agent appended its directives to one file and read the others' answers there."""
    shared = subprocess.run(
        [CLI, "launcher", "--command", "echo {agent_id}", "--deliver", f"file:{tmp_path}/d.md",
         "--redis-url", "redis://127.0.0.1:1"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert shared.returncode == 2 and "would be one file for every agent the launcher starts" in shared.stderr
    spawner = Spawner(
        template=["agent", "{agent_id}"],
        prompt_dir=tmp_path,
        log_dir=tmp_path,
        adapter_args=("--deliver", f"file:{tmp_path}/{{agent_id}}.md"),
        url="redis://127.0.0.1:1/0",
        namespace="sbus",
        cluster=None,
        launcher=Proc(pid=1),
    )
    launch = LaunchRequest(request_id="r", new_agent_id="a/1", reason=LaunchReason.DELEGATION, task="t")
    argv, _ = spawner.command(launch, GROUP, tmp_path / "p.md", "t")
    assert argv[argv.index("--deliver") + 1] == f"file:{tmp_path}/{file_stem('a/1')}.md"
    # a command delivery's {agent_id} is its own placeholder, filled by the adapter with the id itself
    command = replace(spawner, adapter_args=("--deliver", "command:resume --id {agent_id} {prompt}"))
    argv, _ = command.command(launch, GROUP, tmp_path / "p.md", "t")
    assert argv[argv.index("--deliver") + 1] == "command:resume --id {agent_id} {prompt}"


class _Ahead(datetime):
    """The launcher machine's clock, an hour ahead of the server's."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> _Ahead:
        return cls.fromtimestamp((datetime.now(tz) + timedelta(hours=1)).timestamp(), tz)


async def _burst_of_failing_starts(bus: Bus, redis_url: str, tmp_path: Path) -> None:
    """Run a launcher in burst mode whose every start fails (a start, not an expiry, is then a dead
    letter that says "cannot start agent")."""
    options = LauncherOptions(
        template=[str(tmp_path / "no-such-agent")],
        burst=True,
        max_attempts=1,
        prompt_dir=tmp_path / "prompts",
        log_dir=tmp_path / "logs",
    )
    launcher = Launcher(bus.client, bus.keys, Settings.from_url(redis_url), options)
    assert await launcher.run(asyncio.Event()) == 0


async def test_a_request_expires_by_the_server_s_clock_not_the_launcher_s(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the expiry is in the ticks' time (the server's): a launcher whose clock is an hour ahead would
    # otherwise refuse every request as expired, and every agent it should start would be lost
    monkeypatch.setattr(launch_refusals, "datetime", _Ahead)  # where it read its clock
    async with open_bus(redis_url) as bus:
        await request(bus, 1, expires_at=datetime.now(UTC) + timedelta(minutes=15))
        await _burst_of_failing_starts(bus, redis_url, tmp_path)
        [dead] = await stream_fields(bus.client, dead_stream_for(bus.stream(GROUP, StreamKind.TASKS)))
    assert dead[b"reason"].decode().startswith("cannot start agent agent-1")  # read in time: not expired


async def test_a_launcher_user_that_may_not_ask_the_time_goes_by_its_own_clock(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # a launcher user made by an earlier `acl --apply` may not run TIME: the launcher must not stop
    async def refused(client: object, key: object) -> datetime:
        raise CommandFailed("NOPERM User launcher has no permissions to run the 'time' command")

    monkeypatch.setattr(launch_refusals, "server_time", refused)
    now = datetime.now(UTC)
    async with open_bus(redis_url) as bus:
        await request(bus, 1, expires_at=now - timedelta(seconds=1))
        await request(bus, 2, expires_at=now + timedelta(minutes=15))
        await _burst_of_failing_starts(bus, redis_url, tmp_path)
        dead = await stream_fields(bus.client, dead_stream_for(bus.stream(GROUP, StreamKind.TASKS)))
    reasons = [d[b"reason"].decode() for d in dead]
    assert reasons[0].startswith("launch request req-1 expired at ")
    assert reasons[1].startswith("cannot start agent agent-2")  # read in time: not expired
    assert caplog.text.count("expire by this machine's clock") == 1
