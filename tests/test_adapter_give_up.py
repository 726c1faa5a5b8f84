"""Stopping an adapter while Redis is down: output is kept while an agent runs, given up on a signal
that has no agent to stop (real adapters, real redis-servers killed by the test, real signals); an
adapter that fails stops its agent with SIGTERM before any SIGKILL."""

from __future__ import annotations

import re
import signal
import subprocess
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import redis
from adapter_kit import exited, fake, logged, open_bus, spawn, start, wait_until

from agents.agent_process import STOP_GRACE_S
from bus.embedded import RedisProcess, pid_alive
from bus.envelope import EnvelopeType
from bus.events import AgentStarted

T = EnvelopeType
GROUP = "g-give-up"


def run_args(agent: str, *extra: str) -> list[str]:
    return ["adapter", "run", "--agent-id", agent, "--group", GROUP, *extra, "--"]


def gone(pid: int) -> Callable[[], Awaitable[bool]]:
    async def condition() -> bool:
        return not pid_alive(pid)

    return condition


async def first_progress(url: str) -> AgentStarted:
    """The agent's AGENT_STARTED, once the first PROGRESS is on the bus."""
    async with open_bus(url) as bus:
        await wait_until(lambda: bus.has(GROUP, T.PROGRESS), 20, "the first PROGRESS")
        started = (await bus.of_type(GROUP, T.AGENT_STARTED))[0].payload
    assert isinstance(started, AgentStarted)
    return started


async def agent_pid(url: str) -> int:
    pid = (await first_progress(url)).pid
    assert pid is not None
    return pid


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)


async def test_sigint_after_the_agent_exited_gives_up_and_says_what_is_lost(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    go, log = tmp_path / "go", tmp_path / "adapter.log"
    steps = fake("progress:10", f"wait-file:{go}", "progress:50", "complete", agent_id="d1")
    adapter = start([*run_args("d1"), *steps], fresh_redis.url, log)
    try:
        pid = await agent_pid(fresh_redis.url)
        fresh_redis.kill()
        go.touch()  # the agent prints the rest and exits while nothing can take it
        await wait_until(logged(log, "retrying"), 20, "the adapter to retry")
        await wait_until(gone(pid), 20, "the agent to exit")
        adapter.send_signal(signal.SIGINT)
        assert await exited(adapter, 20) == 128 + signal.SIGINT
    finally:
        stop(adapter)
    text = log.read_text()
    assert (
        f"subagent-bus: SIGINT: gave up publishing: 2 envelope(s) (1 PROGRESS, 1 COMPLETION_REPORT) of "
        f"agent d1 in group {GROUP} were not published: they are lost, and so are any output of the "
        "agent's not read yet and the report of its end; the agent exited with status 0 "
        "(the bus is unreachable: Redis unavailable"
    ) in text
    assert "Traceback" not in text


async def test_a_second_signal_gives_up_while_the_agent_is_being_stopped(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    log = tmp_path / "adapter.log"
    adapter = start([*run_args("d2"), *fake("progress:10", "sleep:60", agent_id="d2")], fresh_redis.url, log)
    try:
        pid = await agent_pid(fresh_redis.url)
        fresh_redis.kill()
        adapter.send_signal(signal.SIGTERM)  # passed on: the agent ends, its end cannot be published
        await wait_until(gone(pid), 20, "the agent to exit")
        await wait_until(logged(log, "retrying"), 20, "the adapter to retry")
        assert adapter.poll() is None  # one signal stops the agent, not the publishing
        adapter.send_signal(signal.SIGTERM)
        assert await exited(adapter, 20) == 128 + signal.SIGTERM
    finally:
        stop(adapter)
    text = log.read_text()
    assert (
        f"SIGTERM: gave up publishing: 1 envelope(s) (1 STOP_WORK) of agent d2 in group {GROUP} were not "
        "published: they are lost, and so are any output of the agent's not read yet and the report of its "
        f"end; the agent exited with status {128 + signal.SIGTERM} (the bus is "
    ) in text
    assert "Traceback" not in text


async def test_a_watch_stopped_while_redis_is_down_leaves_the_rest_to_the_next_watch(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    go, log, out = tmp_path / "go", tmp_path / "adapter.log", tmp_path / "agent.out"
    agent = spawn(fake("progress:10", f"wait-file:{go}", "progress:50", "complete", out=out, agent_id="w1"))
    args = ["adapter", "watch", str(out), "--agent-id", "w1", "--group", GROUP, "--until-complete"]
    watch = start(args, fresh_redis.url, log)
    try:
        await first_progress(fresh_redis.url)
        read = out.stat().st_size
        fresh_redis.kill()
        go.touch()
        assert agent.wait(timeout=30) == 0
        await wait_until(logged(log, "retrying"), 20, "the adapter to retry")
        watch.send_signal(signal.SIGTERM)
        assert await exited(watch, 20) == 128 + signal.SIGTERM
    finally:
        stop(watch)
        stop(agent)
    text = log.read_text()
    assert "SIGTERM: gave up publishing: " in text  # how much depends on how far it read
    assert (
        f"of agent w1 in group {GROUP} were not published: they are still in {out}, after byte {read} "
        "(the checkpoint on the server), and the next `adapter watch` of that file publishes them (the "
    ) in text
    assert "Traceback" not in text
    fresh_redis.start()  # its append-only file kept what it had taken
    again = start(args, fresh_redis.url, log)
    try:
        assert await exited(again, 30) == 0, log.read_text()
    finally:
        stop(again)
    async with open_bus(fresh_redis.url) as bus:
        types = [e.type for e in await bus.envelopes(GROUP)]
    assert types == [T.AGENT_STARTED, T.PROGRESS, T.PROGRESS, T.COMPLETION_REPORT, T.AGENT_EXITED]


async def through_a_restart(server: RedisProcess, log: Path, agent: str, work: str, retried: str) -> list[T]:
    """Run an agent that does ``work`` once Redis is down and exits; start Redis again once the adapter
    logged ``retried``: the types of what was published."""
    go = log.with_name("go")
    steps = fake("progress:10", f"wait-file:{go}", work, "complete", agent_id=agent)
    adapter = start([*run_args(agent, "--quiet"), *steps], server.url, log)
    try:
        pid = await agent_pid(server.url)
        server.kill()
        go.touch()
        await wait_until(gone(pid), 30, "the agent to exit")
        await wait_until(logged(log, retried), 30, "the adapter to retry")
        server.start()
        assert await exited(adapter, 60) == 0, log.read_text()  # noqa: ASYNC240 - a failed test's log
    finally:
        stop(adapter)
    async with open_bus(server.url) as bus:
        return [e.type for e in await bus.envelopes(GROUP)]


async def test_without_a_signal_output_waits_for_redis_to_come_back(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    log = tmp_path / "adapter.log"
    types = await through_a_restart(fresh_redis, log, "d3", "progress:50", "retrying")
    assert types == [T.AGENT_STARTED, T.PROGRESS, T.PROGRESS, T.COMPLETION_REPORT, T.AGENT_EXITED]
    assert "gave up" not in log.read_text()


async def test_output_left_in_the_pipe_when_the_agent_exits_waits_for_redis_too(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    # the reader waits for Redis to take what it read; the rest of the output waits in the pipe, past the
    # time a process the agent left running is given to close the output: the sixth attempt comes over
    # 6 s after the first, and so over 2 s after the agent exited
    log, blocks = tmp_path / "adapter.log", 1000  # 160 kB
    types = Counter(await through_a_restart(fresh_redis, log, "d6", f"burst:{blocks}", "retrying in 5.0s"))
    assert (types[T.PROGRESS], types[T.COMPLETION_REPORT]) == (blocks + 1, 1), log.read_text()
    assert "holds its output open" not in log.read_text()


@pytest.mark.parametrize("trouble", ["READONLY", "OOM"])
async def test_a_server_that_refuses_writes_for_a_while_loses_nothing(
    fresh_redis: RedisProcess, tmp_path: Path, trouble: str
) -> None:
    # READONLY (a master demoted to a replica), like CLUSTERDOWN and TRYAGAIN, refuses the batch: each
    # retry took the refused batch for delivered, and the adapter exited 0 without the rest. OOM (maxmemory
    # reached), like MISCONF and BUSY, ended the adapter with an error and killed its agent.
    log, go = tmp_path / "adapter.log", tmp_path / "go"
    steps = fake("progress:10", f"wait-file:{go}", "progress:50", "complete", agent_id="d7")
    adapter = start([*run_args("d7", "--quiet"), *steps], fresh_redis.url, log)
    admin = fresh_redis.client()
    try:
        pid = await agent_pid(fresh_redis.url)
        _trouble(admin, trouble, on=True)
        go.touch()
        await wait_until(gone(pid), 30, "the agent to exit")
        error = "ReadOnlyError" if trouble == "READONLY" else "OutOfMemoryError"
        await wait_until(logged(log, error), 30, "the adapter to retry")
        _trouble(admin, trouble, on=False)
        assert await exited(adapter, 60) == 0, log.read_text()
    finally:
        _trouble(admin, trouble, on=False)
        admin.close()
        stop(adapter)
    async with open_bus(fresh_redis.url) as bus:
        envelopes = await bus.envelopes(GROUP)
    types = [e.type for e in envelopes]
    assert types == [T.AGENT_STARTED, T.PROGRESS, T.PROGRESS, T.COMPLETION_REPORT, T.AGENT_EXITED], types


def _trouble(admin: redis.Redis, trouble: str, *, on: bool) -> None:
    if trouble == "READONLY":  # no master there: read-only until told
        admin.replicaof(*(("127.0.0.1", 1) if on else ("NO", "ONE")))
    else:
        admin.config_set("maxmemory", 1 if on else 0)


async def test_with_wait_for_redis_an_adapter_starts_once_the_server_answers(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    # a launcher's adapter that exited at an outage left its acknowledged request's agent never started
    log = tmp_path / "adapter.log"
    fresh_redis.kill()
    args = [*run_args("d8", "--quiet", "--wait-for-redis"), *fake("complete", agent_id="d8")]
    adapter = start(args, fresh_redis.url, log)
    try:
        await wait_until(logged(log, "retrying in 0.4s"), 30, "a second try")
        fresh_redis.start()
        assert await exited(adapter, 60) == 0, log.read_text()
    finally:
        stop(adapter)
    async with open_bus(fresh_redis.url) as bus:
        types = [e.type for e in await bus.envelopes(GROUP)]
    assert types == [T.AGENT_STARTED, T.COMPLETION_REPORT, T.AGENT_EXITED]
    log = tmp_path / "stopped.log"
    stopped = start(args, "redis://127.0.0.1:1", log)  # nothing there: it waits until told to stop
    try:
        await wait_until(logged(log, "retrying in"), 30, "the first try")
        stopped.send_signal(signal.SIGTERM)
        assert await exited(stopped, 10) == 128 + signal.SIGTERM
    finally:
        stop(stopped)


async def test_a_hung_server_does_not_hold_a_stopped_adapter(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    go, log = tmp_path / "go", tmp_path / "adapter.log"
    steps = fake("progress:10", f"wait-file:{go}", "progress:50", "complete", agent_id="d4")
    adapter = start([*run_args("d4"), *steps], fresh_redis.url, log)
    try:
        pid = await agent_pid(fresh_redis.url)
        assert fresh_redis.process is not None
        fresh_redis.process.send_signal(signal.SIGSTOP)  # takes connections and requests, never answers
        go.touch()
        await wait_until(gone(pid), 20, "the agent to exit")
        adapter.send_signal(signal.SIGINT)
        assert await exited(adapter, 20) == 128 + signal.SIGINT
    finally:
        stop(adapter)
        if fresh_redis.process is not None:
            fresh_redis.process.send_signal(signal.SIGCONT)
    text = log.read_text()
    assert "SIGINT: gave up publishing: " in text
    unanswered = re.search(
        r"\(the server, which did not answer, may still apply the (.+) it was sent last\)", text
    )
    assert unanswered is not None, text
    assert "(the bus is unreachable: no answer within 2s)" in text
    assert "Traceback" not in text
    # and it does: the batch waited in its socket buffer
    sent = [
        T(kind)
        for n, kind in (item.split() for item in unanswered.group(1).split(", "))
        for _ in range(int(n))
    ]
    printed_last = [T.PROGRESS, T.COMPLETION_REPORT, T.AGENT_EXITED]
    assert sent and sent == printed_last[: len(sent)], sent  # how far the first batch got varies

    async def applied() -> bool:
        async with open_bus(fresh_redis.url) as bus:
            return [e.type for e in await bus.envelopes(GROUP)] == [T.AGENT_STARTED, T.PROGRESS, *sent]

    await wait_until(applied, 20, "the resumed server to apply the batch")


async def failing(server: RedisProcess, log: Path, agent: str, trap: str) -> int:
    """Run an agent that sets ``trap`` (a step of the fake agent) and then prints on; once it runs, the
    server's ACL stops allowing the adapter's writes, an error it does not wait out: the agent's pid,
    once the adapter exited with status 1."""
    go = log.with_name("go")
    admin = server.client()
    admin.acl_setuser("writer", enabled=True, passwords=["+writer-pw"], keys=["*"], commands=["+@all"])
    url = server.url.replace("redis://", "redis://writer:writer-pw@")
    steps = fake(
        trap, "progress:10", f"wait-file:{go}", "progress:50", "progress:60", "sleep:60", agent_id=agent
    )
    adapter = start([*run_args(agent, "--quiet"), *steps], url, log)
    try:
        pid = await agent_pid(server.url)
        admin.acl_setuser("writer", enabled=True, commands=["-xadd"])  # added to its rules
        go.touch()
        assert await exited(adapter, 30) == 1, log.read_text()  # noqa: ASYNC240 - a failed test's log
    finally:
        admin.close()
        stop(adapter)
    assert "no permissions to run the 'xadd' command" in log.read_text()  # noqa: ASYNC240 - it has exited
    return pid


async def test_an_adapter_that_fails_gives_its_agent_sigterm_and_time_to_save_its_work(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    # it was killed with SIGKILL at once: nothing the agent did to save its session or work could run
    log, noted = tmp_path / "adapter.log", tmp_path / "noted"
    pid = await failing(fresh_redis, log, "d9", f"save-on-term:{noted}")
    assert noted.read_text() == "SIGTERM\nsaved\n", log.read_text()
    assert not pid_alive(pid)
    assert "killed" not in log.read_text()


async def test_an_agent_that_prints_on_as_it_saves_its_work_is_read_not_killed(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    """Its output is read on through the grace (not published: the adapter failed), so an agent that
    prints more than a pipe holds as it saves its work is not blocked on the write and killed for it."""
    log, noted = tmp_path / "adapter.log", tmp_path / "noted"
    pid = await failing(fresh_redis, log, "d11", f"loud-save-on-term:{noted}")
    assert noted.read_text() == "SIGTERM\nsaved\n", log.read_text()
    assert not pid_alive(pid)
    text = log.read_text()
    assert "killed" not in text
    dropped = re.search(
        r"(\d+) bytes of the agent's output read while it was being stopped were not published", text
    )
    assert dropped is not None and int(dropped.group(1)) >= 1 << 20, text  # what it printed as it saved


async def test_an_agent_that_ignores_sigterm_is_killed_after_the_grace(
    fresh_redis: RedisProcess, tmp_path: Path
) -> None:
    log, noted = tmp_path / "adapter.log", tmp_path / "noted"
    pid = await failing(fresh_redis, log, "d10", f"ignore-term:{noted}")
    assert noted.read_text() == "SIGTERM\n", log.read_text()
    assert not pid_alive(pid)
    assert f"the agent did not exit within {STOP_GRACE_S:g}s of SIGTERM: killed" in log.read_text()


def _piped(
    steps: list[str], agent_id: str, url: str, log: Path
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """A fake agent whose output is piped into `adapter stdin`: (the agent, the adapter)."""
    producer = spawn(steps, stdout=subprocess.PIPE)
    assert producer.stdout is not None
    args = ["adapter", "stdin", "--agent-id", agent_id, "--group", GROUP, "--quiet"]
    adapter = start(args, url, log, stdin=producer.stdout)
    producer.stdout.close()
    return producer, adapter


async def test_stdin_gives_up_at_the_first_signal(fresh_redis: RedisProcess, tmp_path: Path) -> None:
    go, log = tmp_path / "go", tmp_path / "adapter.log"
    steps = fake("progress:10", f"wait-file:{go}", "progress:50", "complete", "sleep:60", agent_id="s1")
    producer, adapter = _piped(steps, "s1", fresh_redis.url, log)
    try:
        await first_progress(fresh_redis.url)
        fresh_redis.kill()
        go.touch()
        await wait_until(logged(log, "retrying"), 20, "the adapter to retry")
        adapter.send_signal(signal.SIGINT)  # there is no agent of its own to pass it on to
        assert await exited(adapter, 20) == 128 + signal.SIGINT
    finally:
        stop(adapter)
        stop(producer)
    text = log.read_text()
    assert "SIGINT: gave up publishing: " in text
    assert (
        f"of agent s1 in group {GROUP} were not published: they are lost, and so are any output of the "
        "agent's not read yet and the report of its end (the bus is unreachable"
    ) in text
    assert "Traceback" not in text


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
async def test_stdin_stopped_with_nothing_left_unsent_ends_as_usual(
    fresh_redis: RedisProcess, tmp_path: Path, sig: signal.Signals
) -> None:
    log = tmp_path / "adapter.log"
    producer, adapter = _piped(fake("progress:10", "sleep:60", agent_id="s2"), "s2", fresh_redis.url, log)
    try:
        await first_progress(fresh_redis.url)
        adapter.send_signal(sig)
        assert await exited(adapter, 20) == 0, log.read_text()
    finally:
        stop(adapter)
        stop(producer)
    assert "not published" not in log.read_text()
