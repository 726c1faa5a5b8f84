"""``adapter run`` and ``adapter stdin``: real agent processes, real Redis, real signals."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from adapter_kit import CLI, Bus, exited, fake, logged, open_bus, run_ok, spawn, start, wait_until

from agents.adapter import MAX_TASK_CHARS
from agents.agent_process import start_error
from bus.directives import AnswerItem, ClarificationResponse, DelegationApproved
from bus.envelope import Envelope, EnvelopeType, Kind, new_envelope
from bus.events import AgentExited, AgentStarted, Heartbeat
from bus.publisher import Publisher
from bus.signals import BlockerType, StopReason, StopWork

T = EnvelopeType
GROUP = "g-run"


def run_args(agent: str, *extra: str) -> list[str]:
    return ["adapter", "run", "--agent-id", agent, "--group", GROUP, *extra, "--"]


async def test_a_crashing_agent_becomes_a_stop_work_error(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "adapter.log"
    adapter = start(
        [*run_args("r1"), *fake("say:working", "progress:20", "crash:3", agent_id="r1")], redis_url, log
    )
    assert await exited(adapter, 30) == 3
    async with open_bus(redis_url) as bus:
        envelopes = await bus.envelopes(GROUP)
    assert [e.type for e in envelopes] == [T.AGENT_STARTED, T.PROGRESS, T.STOP_WORK, T.AGENT_EXITED]
    started, _, stop, exit_ = (e.payload for e in envelopes)
    assert isinstance(started, AgentStarted)
    assert started.pid is not None
    assert started.command is not None
    assert started.command[-1] == "crash:3"
    assert isinstance(stop, StopWork)
    assert stop.stop_reason is StopReason.ERROR
    assert stop.blocker_type is BlockerType.ERROR
    assert "exited with code 3 without a completion report" in stop.details
    assert "TypeError: cannot read 'length'" in stop.details
    assert isinstance(exit_, AgentExited)
    assert exit_.exit_code == 3
    assert not exit_.completed
    assert exit_.resumable is False  # the adapter ends with its agent: nobody reads its inbox after
    assert exit_.stderr_tail is not None
    assert "TypeError" in exit_.stderr_tail
    assert "TypeError" in log.read_text()  # stderr passes through


async def test_an_agent_that_said_it_waits_then_fails_keeps_its_own_stop_or_question(
    redis_url: str, tmp_path: Path
) -> None:
    # its blocker (with what it needs to go on) is what the parent must see, not "exited with code 3"
    log = tmp_path / "adapter.log"
    for agent, said in (("r16", "stop"), ("r17", "clarify")):
        adapter = start([*run_args(agent), *fake(said, "crash:3", agent_id=agent)], redis_url, log)
        assert await exited(adapter, 30) == 3
    async with open_bus(redis_url) as bus:
        envelopes = await bus.envelopes(GROUP)
    assert [(e.agent_id, e.type) for e in envelopes if e.type is not T.AGENT_STARTED] == [
        ("r16", T.STOP_WORK),
        ("r16", T.AGENT_EXITED),
        ("r17", T.CLARIFICATION_NEEDED),
        ("r17", T.AGENT_EXITED),
    ]
    stop = envelopes[1].payload
    assert isinstance(stop, StopWork) and stop.stop_reason is not StopReason.ERROR
    exits = [e.payload for e in envelopes if isinstance(e.payload, AgentExited)]
    assert all(x.exit_code == 3 and x.stderr_tail and "TypeError" in x.stderr_tail for x in exits)


async def test_a_lost_completion_or_a_recalled_question_does_not_hide_a_crash(
    redis_url: str, tmp_path: Path
) -> None:
    # neither says the agent waits: the crash must reach the parent as a blocker with its stderr
    log, agent = tmp_path / "adapter.log", tmp_path / "agent.sh"
    asked = "[CLARIFICATION_NEEDED]\nagent_id: r18\ntimestamp: 2026-01-11T08:45:00Z\nblocked_at: src\n"
    asked += "reason: which\nquestions:\n  - question_id: Q1\n    text: Which one?\n[/CLARIFICATION_NEEDED]\n"
    agent.write_text(
        f"#!/bin/sh\nprintf '%s' '{asked}'\n[ -n \"$1\" ] && echo 'Out of memory' >&2 && exit 137\n"
    )
    agent.chmod(0o755)
    cut = "printf '[COMPLETION_REPORT]\\nagent_id: r19\\nstatus: success\\n'; echo 'Out of memory' >&2; exit 137"
    async with open_bus(redis_url) as bus:
        adapters = [
            start([*run_args("r19"), "sh", "-c", cut], redis_url, log),
            start(
                [*run_args("r18", "--until-complete", "--deliver", f"command:{agent} resumed"), str(agent)],
                redis_url,
                log,
            ),
        ]
        assert await exited(adapters[0], 30) == 137
        await wait_until(lambda: bus.has(GROUP, T.AGENT_EXITED, 2), 30, "the first turn of r18")
        answer = ClarificationResponse(answers=[AnswerItem(question_id="Q1", question="Which?", answer="a")])
        directive = new_envelope(answer, agent_id="r18", group_id=GROUP, source="coordinator")
        await Publisher(bus.client, bus.keys).send_directive(directive)  # the resumed turn recalls Q1
        await wait_until(lambda: bus.has(GROUP, T.AGENT_EXITED, 3), 30, "the second turn of r18")
        adapters[1].terminate()
        assert await exited(adapters[1], 30) == 137, log.read_text()  # the agent's last status
        stops = [e.payload for e in await bus.of_type(GROUP, T.STOP_WORK)]
    crashes = [s for s in stops if isinstance(s, StopWork) and "was killed by signal 9" in s.details]
    assert sorted(s.agent_id for s in crashes) == ["r18", "r19"]
    assert all("Out of memory" in s.details for s in crashes)


async def test_a_completed_agent_exits_cleanly_and_its_output_is_copied(
    redis_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "adapter.log"
    out = tmp_path / "stdout"
    steps = fake("say:hello there", "complete", agent_id="r2")
    with out.open("wb") as stdout:
        adapter = start(
            [*run_args("r2", "--name", "Security Auditor"), *steps], redis_url, log, stdout=stdout
        )
        assert await exited(adapter, 30) == 0
    assert "hello there" in out.read_text()
    assert "[COMPLETION_REPORT]" in out.read_text()
    async with open_bus(redis_url) as bus:
        envelopes = await bus.envelopes(GROUP)
    assert [e.type for e in envelopes] == [T.AGENT_STARTED, T.COMPLETION_REPORT, T.AGENT_EXITED]
    assert isinstance(envelopes[0].payload, AgentStarted)
    assert envelopes[0].payload.name == "Security Auditor"
    assert envelopes[2].payload == AgentExited(exit_code=0, completed=True, resumable=False)


async def test_a_failure_after_completion_is_not_an_error_signal(redis_url: str, tmp_path: Path) -> None:
    adapter = start(
        [*run_args("r3", "--quiet"), *fake("complete", "crash:1", agent_id="r3")], redis_url, tmp_path / "log"
    )
    assert await exited(adapter, 30) == 1
    async with open_bus(redis_url) as bus:
        assert [e.type for e in await bus.envelopes(GROUP)] == [
            T.AGENT_STARTED,
            T.COMPLETION_REPORT,
            T.AGENT_EXITED,
        ]


_DATA = Path(__file__).parent / "data"
_PRINTS = "import sys; sys.stdout.buffer.write(open(sys.argv[1], 'rb').read()); sys.exit(int(sys.argv[2]))"
"""An agent that prints a recorded output and exits with the status it is given."""


def _run(data: bytes, part: int) -> bytes:
    """The ``part``-th run (0, 1, ...) of recorded ``claude -p`` output: each starts with its init entry."""
    starts = [n for n in range(len(data)) if data.startswith(b'{"type": "system"', n)]
    return data[starts[part] : [*starts, len(data)][part + 1]]


@pytest.mark.parametrize(
    ("recorded", "code", "said"),
    [
        (
            (_DATA / "codex_exec_failed.jsonl").read_bytes(),
            1,
            "Codex CLI reported turn.failed: You've hit your usage limit. Upgrade to Pro "
            "(https://openai.com/chatgpt/pricing), or try again in 2 days 4 hours 11 minutes.",
        ),
        (
            _run((_DATA / "claude_print_failed.jsonl").read_bytes(), 0),
            1,
            "Claude Code's result is an error (error_max_turns): Reached maximum number of turns (2)",
        ),
        (
            _run((_DATA / "claude_print_failed.jsonl").read_bytes(), 1),
            0,  # claude -p exits 0 after an API error
            "Claude Code's request to the API failed: API Error: 529 "
            '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":null}',
        ),
    ],
    ids=["codex turn.failed", "claude error_max_turns", "claude API error"],
)
async def test_a_failed_turn_the_agents_program_reports_is_a_stop_work_error_saying_why(
    redis_url: str, tmp_path: Path, recorded: bytes, code: int, said: str
) -> None:
    # the failure was seen, if at all, from the exit status: "exited with code 1", or nothing after exit 0
    log, output = tmp_path / "adapter.log", tmp_path / "output.jsonl"
    output.write_bytes(recorded)
    agent = [sys.executable, "-c", _PRINTS, str(output), str(code)]
    adapter = start([*run_args("r21", "--quiet"), *agent], redis_url, log)
    assert await exited(adapter, 30) == code, log.read_text()
    async with open_bus(redis_url) as bus:
        envelopes = [e for e in await bus.envelopes(GROUP) if e.type is not T.PROGRESS]
    assert [e.type for e in envelopes] == [T.AGENT_STARTED, T.STOP_WORK, T.AGENT_EXITED]
    stop, exit_ = envelopes[1].payload, envelopes[2].payload
    assert isinstance(stop, StopWork)
    assert (stop.stop_reason, stop.blocker_type) == (StopReason.ERROR, BlockerType.ERROR)
    assert stop.details == f"The agent's turn failed: {said}"
    assert stop.error_recovery is not None and "Retry from the last checkpoint" in stop.error_recovery
    assert isinstance(exit_, AgentExited)
    assert (exit_.exit_code, exit_.completed) == (code, False)
    assert f"the agent's turn failed: {said}" in log.read_text()
    await run_ok([CLI, "coordinator", "--burst", "--redis-url", redis_url])  # the parent sees why
    shown = await run_ok([CLI, "status", "--group", GROUP, "--redis-url", redis_url])
    assert "r21 blocked (error): The agent's turn failed: " in shown.decode(), shown.decode()


async def test_a_failed_turn_after_the_completion_is_only_logged(redis_url: str, tmp_path: Path) -> None:
    log, output = tmp_path / "adapter.log", tmp_path / "output.jsonl"
    completion = "[COMPLETION_REPORT]\nagent_id: r22\nstatus: success\nsummary: Done\n[/COMPLETION_REPORT]"
    message = {"id": "item_1", "type": "agent_message", "text": completion}
    failed = {"type": "turn.failed", "error": {"message": "stream disconnected"}}
    lines = [{"type": "item.completed", "item": message}, failed]
    output.write_bytes(b"".join(json.dumps(entry).encode() + b"\n" for entry in lines))
    agent = [sys.executable, "-c", _PRINTS, str(output), "1"]
    adapter = start([*run_args("r22", "--quiet"), *agent], redis_url, log)
    assert await exited(adapter, 30) == 1, log.read_text()
    async with open_bus(redis_url) as bus:
        types = [e.type for e in await bus.envelopes(GROUP)]
    assert types == [T.AGENT_STARTED, T.COMPLETION_REPORT, T.AGENT_EXITED]
    assert (
        "after the agent's completion: Codex CLI reported turn.failed: stream disconnected" in log.read_text()
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_sigterm_is_passed_to_the_agent(redis_url: str, tmp_path: Path, sig: signal.Signals) -> None:
    """SIGHUP too: its terminal closed, the adapter stops its agent (in a session of its own, the agent
    would not hear of it) and says so, rather than dying and leaving it running."""
    log = tmp_path / "adapter.log"
    # Started as from a terminal: a suite run under `nohup` would hand it a SIGHUP it is to keep ignoring.
    adapter = start(
        [*run_args("r4"), *fake("say:waiting", "sleep:60", agent_id="r4")],
        redis_url,
        log,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    async with open_bus(redis_url) as bus:

        async def agent_started() -> bool:
            return await bus.has(GROUP, T.AGENT_STARTED)

        await wait_until(agent_started, 20, "the agent to start")
        adapter.send_signal(sig)
        assert await exited(adapter, 20) == 128 + sig
        stop = (await bus.of_type(GROUP, T.STOP_WORK))[0].payload
        assert isinstance(stop, StopWork)
        assert f"killed by signal {int(sig)}" in stop.details


_SIGTERM_NOTING_AGENT = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (open(sys.argv[2], "w").write("SIGTERM"), os._exit(0)))
with open(sys.argv[1] + ".tmp", "w") as pid:
    pid.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    """Whether a process that is not our child has ended: no such pid, or a zombie its new parent has
    not reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="the agent outlives its adapter elsewhere")
async def test_an_agent_gets_sigterm_when_its_adapter_is_killed(redis_url: str, tmp_path: Path) -> None:
    """Killed with SIGKILL, the adapter stops nothing itself: without SIGTERM the agent would run on,
    its output read by nobody."""
    log, pid_file, signalled = tmp_path / "adapter.log", tmp_path / "agent.pid", tmp_path / "signalled"
    agent = [sys.executable, "-c", _SIGTERM_NOTING_AGENT, str(pid_file), str(signalled)]
    adapter = start([*run_args("r18"), *agent], redis_url, log)

    async def agent_started() -> bool:
        return pid_file.exists()

    await wait_until(agent_started, 20, "the agent to write its pid")
    pid = int(pid_file.read_text())
    adapter.send_signal(signal.SIGKILL)
    assert await exited(adapter, 20) == -signal.SIGKILL

    async def agent_ended() -> bool:
        return _gone(pid)

    await wait_until(agent_ended, 10, "the agent to end")
    assert signalled.read_text() == "SIGTERM", log.read_text()


def _ignoring_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what `nohup` does before it runs its command


async def test_an_adapter_started_by_nohup_outlives_sighup(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "adapter.log"
    steps = fake("say:waiting", "sleep:60", agent_id="r13")
    args = [*run_args("r13", "--heartbeat", "0.1"), *steps]
    adapter = start(args, redis_url, log, preexec_fn=_ignoring_sighup)
    async with open_bus(redis_url) as bus:

        async def agent_started() -> bool:
            return await bus.has(GROUP, T.AGENT_STARTED)

        await wait_until(agent_started, 20, "the agent to start")
        adapter.send_signal(signal.SIGHUP)  # its terminal closed: ignored, as nohup asked
        beats = await bus.count(GROUP, T.HEARTBEAT)

        async def beating_on() -> bool:  # handled, the signal would have ended it within milliseconds
            return adapter.poll() is not None or await bus.count(GROUP, T.HEARTBEAT) >= beats + 3

        await wait_until(beating_on, 20, "three more heartbeats, or the adapter's end")
        assert adapter.poll() is None, log.read_text()
        adapter.send_signal(signal.SIGTERM)
        assert await exited(adapter, 20) == 128 + signal.SIGTERM, log.read_text()
        stop = (await bus.of_type(GROUP, T.STOP_WORK))[0].payload
        assert isinstance(stop, StopWork)
        assert f"killed by signal {int(signal.SIGTERM)}" in stop.details


async def waiting_for_its_delegate(
    bus: Bus, url: str, tmp_path: Path, agent: str, deliver: str
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """An adapter whose agent delegated work it waits for and ended its turn: the adapter, its log and
    its idle file (which says it waits)."""
    log, idle = tmp_path / "adapter.log", tmp_path / f"{agent}.idle"
    options = ("--until-complete", "--deliver", deliver, "--idle-file", str(idle))
    steps = fake("delegate:blocks_current_work", agent_id=agent)
    adapter = start([*run_args(agent, *options), *steps], url, log)

    async def waiting() -> bool:
        return await bus.has(GROUP, T.AGENT_EXITED) and idle.exists()

    await wait_until(waiting, 20, "the agent's first turn to end and the adapter to say it waits")
    return adapter, log, idle


async def test_sigterm_between_turns_says_nobody_resumes_the_agent_any_more(
    redis_url: str, tmp_path: Path
) -> None:
    resume = f"command:{' '.join(fake('complete', agent_id='r12'))}"
    async with open_bus(redis_url) as bus:
        adapter, log, idle = await waiting_for_its_delegate(bus, redis_url, tmp_path, "r12", resume)
        adapter.send_signal(signal.SIGTERM)  # it waits for a directive to resume the agent with
        assert await exited(adapter, 20) == 0, log.read_text()
        assert not idle.exists()
        exits = [e.payload for e in await bus.of_type(GROUP, T.AGENT_EXITED) if e.agent_id == "r12"]
    assert exits == [
        AgentExited(exit_code=0, completed=False, resumable=True),
        AgentExited(exit_code=None, completed=False, resumable=False),
    ]


async def test_an_agent_whose_resume_cannot_start_still_waits_for_its_delegate_without_a_slot(
    redis_url: str, tmp_path: Path
) -> None:
    program = tmp_path / "resume-agent"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    async with open_bus(redis_url) as bus:
        deliver = f"command:{program} {{prompt}}"
        adapter, log, idle = await waiting_for_its_delegate(bus, redis_url, tmp_path, "r17", deliver)
        program.unlink()  # being reinstalled, say
        # the approval: it goes on waiting for its delegate, whose results resume it
        approved = DelegationApproved(request_id="dlg-1", new_agent_id="r17-delegate", task="refactor")
        directive = new_envelope(approved, agent_id="r17", group_id=GROUP, source="coordinator")
        await Publisher(bus.client, bus.keys).send_directive(directive)
        await wait_until(logged(log, "cannot start"), 20, "the resume to fail")
        assert idle.exists()  # it waits on: a launcher's slot is still free for others
        adapter.send_signal(signal.SIGTERM)
        assert await exited(adapter, 20) == 0, log.read_text()
        assert not idle.exists()


async def _answer_waiting(bus: Bus, agent: str) -> tuple[Envelope, str]:
    """An answer in ``agent``'s inbox before its adapter starts, and a --deliver resume command."""
    answer = ClarificationResponse(answers=[AnswerItem(question_id="Q1", question="q?", answer="a")])
    directive = new_envelope(answer, agent_id=agent, group_id=GROUP, source="coordinator")
    await Publisher(bus.client, bus.keys).send_directive(directive)
    return directive, f"command:{' '.join(fake('complete', agent_id=agent))}"


async def test_a_directive_after_the_completion_starts_no_other_turn(redis_url: str, tmp_path: Path) -> None:
    # e.g. the answer to its second delegation, which arrives after the agent completed
    log = tmp_path / "adapter.log"
    async with open_bus(redis_url) as bus:
        late, resume = await _answer_waiting(bus, "r13")
        steps = fake("sleep:0.5", "complete", agent_id="r13")  # the inbox is read while it works
        adapter = start([*run_args("r13", "--until-complete", "--deliver", resume), *steps], redis_url, log)
        assert await exited(adapter, 30) == 0, log.read_text()
        assert await bus.count(GROUP, T.AGENT_STARTED) == 1, log.read_text()
        pending: Any = await bus.client.xpending(bus.inbox(GROUP, "r13"), "adapter")
        assert pending["pending"] == 0  # acknowledged, not left for a reader that never comes
    assert f"CLARIFICATION_RESPONSE {late.id} not delivered: the agent has completed" in log.read_text()


async def test_without_until_complete_a_directive_read_during_the_turn_starts_no_other(
    redis_url: str, tmp_path: Path
) -> None:
    """The adapter said in AGENT_EXITED that nobody resumes the agent here: the coordinator starts it
    again with that directive (or leaves it to whoever starts it); a turn here would be a second one."""
    log = tmp_path / "adapter.log"
    async with open_bus(redis_url) as bus:
        _, resume = await _answer_waiting(bus, "r14")
        steps = fake("sleep:0.5", agent_id="r14")  # the inbox is read while it works; no completion
        adapter = start([*run_args("r14", "--deliver", resume), *steps], redis_url, log)
        assert await exited(adapter, 30) == 0, log.read_text()
        assert await bus.count(GROUP, T.AGENT_STARTED) == 1, log.read_text()
        [exit_] = await bus.of_type(GROUP, T.AGENT_EXITED)
        assert exit_.payload == AgentExited(exit_code=0, completed=False, resumable=False)
        pending: Any = await bus.client.xpending(bus.inbox(GROUP, "r14"), "adapter")
        assert pending["pending"] == 1  # not delivered here: pending, as an adapter stopping leaves it
    assert "this adapter ends with it (no --until-complete)" in log.read_text()


async def test_stdin_without_until_complete_starts_no_turn_after_its_input_ends(
    redis_url: str, tmp_path: Path
) -> None:
    """As `adapter run`: its AGENT_EXITED said nobody resumes the agent here, and then the directive read
    while the input was open started a turn all the same."""
    log = tmp_path / "adapter.log"
    async with open_bus(redis_url) as bus:
        _, resume = await _answer_waiting(bus, "r16")
        adapter = start(
            ["adapter", "stdin", "--agent-id", "r16", "--group", GROUP, "--quiet", "--deliver", resume],
            redis_url,
            log,
            stdin=subprocess.PIPE,
        )

        async def read() -> bool:  # the directive is delivered to the adapter, its input still open
            with contextlib.suppress(redis.ResponseError):  # no group yet
                held: Any = await bus.client.xpending(bus.inbox(GROUP, "r16"), "adapter")
                return bool(held["pending"])
            return False

        await wait_until(read, 20, "the directive to be read")
        assert adapter.stdin is not None
        adapter.stdin.close()
        assert await exited(adapter, 30) == 0, log.read_text()
        assert await bus.count(GROUP, T.AGENT_STARTED) == 1, log.read_text()
        [exit_] = await bus.of_type(GROUP, T.AGENT_EXITED)
        assert exit_.payload == AgentExited(exit_code=None, completed=False, resumable=False)
        pending: Any = await bus.client.xpending(bus.inbox(GROUP, "r16"), "adapter")
        assert pending["pending"] == 1
    assert "this adapter ends with it (no --until-complete)" in log.read_text()


@pytest.mark.parametrize("held", ["", ">/dev/null"])  # stdout and stderr, or stderr alone
async def test_a_process_the_agent_leaves_running_does_not_hold_its_exit_back(
    redis_url: str, tmp_path: Path, held: str
) -> None:
    # `server &` in the agent: the server keeps the agent's output open after the agent exited
    log, pid_file = tmp_path / "adapter.log", tmp_path / "server.pid"
    agent = f"sleep 120 {held} & echo $! > {pid_file}; echo working; exit 3"
    adapter = start([*run_args("r16"), "sh", "-c", agent], redis_url, log)
    try:
        assert await exited(adapter, 30) == 3, log.read_text()
        async with open_bus(redis_url) as bus:
            envelopes = [e for e in await bus.envelopes(GROUP) if e.agent_id == "r16"]
        assert [e.type for e in envelopes] == [T.AGENT_STARTED, T.STOP_WORK, T.AGENT_EXITED]
        assert isinstance(envelopes[-1].payload, AgentExited) and envelopes[-1].payload.exit_code == 3
        said = log.read_text()
        assert "a process it started holds its output open: not read any more" in said
        assert "Traceback" not in said and "Exception ignored" not in said
    finally:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


async def test_a_command_that_is_no_program_is_refused_before_anything_is_published(
    redis_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-agent"
    for program, why in [
        (str(missing), f"{missing} is not an executable file"),
        ("no-such-agent-program", "'no-such-agent-program' is not a program on PATH"),
    ]:
        log = tmp_path / "adapter.log"
        adapter = start([*run_args("r5"), program, "--task", "x"], redis_url, log)
        assert await exited(adapter, 20) == 2
        assert f"Error: Invalid value for 'CMD': {why}\n" in log.read_text()
    async with open_bus(redis_url) as bus:
        assert await bus.envelopes(GROUP) == []


async def test_a_command_that_cannot_start(redis_url: str, tmp_path: Path) -> None:
    """A program that is there but cannot be executed (its interpreter is missing) fails at the start."""
    log = tmp_path / "adapter.log"
    broken = tmp_path / "broken-agent"
    broken.write_text("#!/no/such/interpreter\n")
    broken.chmod(0o755)
    adapter = start([*run_args("r5"), str(broken)], redis_url, log)
    assert await exited(adapter, 20) == 127
    said = f"subagent-bus: cannot start {broken}: its interpreter /no/such/interpreter (its #! line) is not there\n"
    assert said in log.read_text()
    async with open_bus(redis_url) as bus:
        envelopes = await bus.envelopes(GROUP)
    assert [e.type for e in envelopes] == [T.STOP_WORK, T.AGENT_EXITED]
    stop = envelopes[0].payload
    assert isinstance(stop, StopWork)
    assert "cannot start" in stop.details


def test_a_script_that_cannot_start_is_told_by_its_interpreter(tmp_path: Path) -> None:
    def said(first_line: bytes) -> str:
        script = tmp_path / "agent"
        script.write_bytes(first_line + b"echo hi\n")
        script.chmod(0o755)
        with pytest.raises(OSError) as failed:
            subprocess.Popen([str(script)])
        return start_error(str(script), failed.value)

    assert said(b"#!/no/such/interpreter -x\n").endswith(
        ": its interpreter /no/such/interpreter (its #! line) is not there"
    )
    assert said(b"#!/bin/sh\r\n").endswith(
        ": its #! line ends in a carriage return (Windows line ends): no interpreter is named '/bin/sh\\r'"
    )


async def test_heartbeats_while_the_agent_lives(redis_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    log = tmp_path / "adapter.log"
    steps = fake("progress:5", f"wait-file:{go}", "complete", agent_id="r6")
    adapter = start(
        [*run_args("r6", "--heartbeat", "0.1", "--stderr-log", str(tmp_path / "agent.err")), *steps],
        redis_url,
        log,
    )
    async with open_bus(redis_url) as bus:

        async def beating() -> bool:
            return await bus.count(GROUP, T.HEARTBEAT) >= 3

        await wait_until(beating, 20, "three heartbeats")
        go.touch()
        assert await exited(adapter, 20) == 0
        beats = await bus.of_type(GROUP, T.HEARTBEAT)
        started = (await bus.of_type(GROUP, T.AGENT_STARTED))[0].payload
        assert isinstance(started, AgentStarted)
        assert {b.payload for b in beats} == {Heartbeat(pid=started.pid)}
        assert len({b.id for b in beats}) == len(beats)
        assert (await bus.envelopes(GROUP))[-1].type is T.AGENT_EXITED


async def test_stdin_publishes_a_piped_output(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "adapter.log"
    producer = spawn(
        fake("say:hi", "progress:40", "delegate", "complete", agent_id="r7"), stdout=subprocess.PIPE
    )
    assert producer.stdout is not None
    adapter = start(
        ["adapter", "stdin", "--agent-id", "r7", "--group", GROUP, "--quiet"],
        redis_url,
        log,
        stdin=producer.stdout,
    )
    producer.stdout.close()
    assert await exited(adapter, 30) == 0, log.read_text()
    assert producer.wait(timeout=10) == 0
    async with open_bus(redis_url) as bus:
        envelopes = await bus.envelopes(GROUP)
    assert [e.type for e in envelopes] == [
        T.AGENT_STARTED,
        T.PROGRESS,
        T.DELEGATE_WORK,
        T.COMPLETION_REPORT,
        T.AGENT_EXITED,
    ]
    assert all(e.agent_id == "r7" and e.source.startswith("stdin:") for e in envelopes)
    assert envelopes[-1].payload == AgentExited(exit_code=None, completed=True, resumable=False)
    assert [e.kind for e in envelopes[1:4]] == [Kind.SIGNAL] * 3


async def test_stdin_publishes_a_signal_that_ends_a_paused_pipe_without_a_newline(
    redis_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "adapter.log"
    read_end, write_end = os.pipe()
    args = ["adapter", "stdin", "--agent-id", "r15", "--group", GROUP, "--quiet"]
    adapter = start(args, redis_url, log, stdin=read_end)
    os.close(read_end)
    with os.fdopen(write_end, "wb") as agent:
        agent.write(b"[STOP_WORK]\nagent_id: r15\nstop_reason: blocker\nblocker_type: missing_info\n")
        agent.write(b"details: the key\n[/STOP_WORK]")
        agent.flush()
        async with open_bus(redis_url) as bus:  # the pipe stays open: the agent waits for its answer
            await wait_until(lambda: bus.has(GROUP, T.STOP_WORK), 20, "the STOP_WORK")
    assert await exited(adapter, 30) == 0, log.read_text()
    async with open_bus(redis_url) as bus:
        types = [e.type for e in await bus.envelopes(GROUP)]
    assert types == [T.AGENT_STARTED, T.STOP_WORK, T.AGENT_EXITED]


async def test_stdin_from_dev_null_is_an_empty_output(redis_url: str, tmp_path: Path) -> None:
    # stdin under cron, nohup or CI: a device the event loop cannot watch
    log = tmp_path / "adapter.log"
    args = ["adapter", "stdin", "--agent-id", "r14", "--group", GROUP]
    adapter = start(args, redis_url, log, stdin=subprocess.DEVNULL)  # /dev/null
    assert await exited(adapter, 30) == 0, log.read_text()
    async with open_bus(redis_url) as bus:
        envelopes = [e for e in await bus.envelopes(GROUP) if e.agent_id == "r14"]
    assert [e.type for e in envelopes] == [T.AGENT_STARTED, T.AGENT_EXITED]


async def test_a_result_too_large_for_an_envelope_is_a_stop_work_error_in_its_place(
    redis_url: str, tmp_path: Path
) -> None:
    # within the parser's 1 MiB, but each control character is six bytes of JSON: over 4 MiB encoded
    notes = "\x01" * 800_000
    report = f"## Auditor Result\n\n### Status\nSUCCESS\n\n### Summary\nDone.\n\n### Notes\n{notes}\n"
    output = tmp_path / "output.md"
    output.write_text(report)
    log = tmp_path / "adapter.log"
    with output.open("rb") as stdin:
        adapter = start(
            ["adapter", "stdin", "--agent-id", "r15", "--group", GROUP], redis_url, log, stdin=stdin
        )
        assert await exited(adapter, 30) == 0, log.read_text()
    async with open_bus(redis_url) as bus:
        envelopes = [e for e in await bus.envelopes(GROUP) if e.agent_id == "r15"]
    assert [e.type for e in envelopes] == [T.AGENT_STARTED, T.STOP_WORK, T.AGENT_EXITED]
    lost = envelopes[1].payload
    assert isinstance(lost, StopWork) and lost.stop_reason is StopReason.ERROR
    assert "result report" in lost.details and "over the 4194304-byte limit of an envelope" in lost.details
    assert envelopes[2].payload == AgentExited(exit_code=None, completed=False, resumable=False)
    assert "r15: RESULT " in log.read_text() and "not published: it is" in log.read_text()


async def test_until_complete_ends_with_a_stop_that_reports_completion(
    redis_url: str, tmp_path: Path
) -> None:
    """``stop_reason: completion`` is a completion to the coordinator: no directive will come, and an
    adapter that waited for one would hold its launcher's slot for good."""
    log, never = tmp_path / "adapter.log", tmp_path / "never-resumed"
    resume = f"command:{' '.join(fake('complete', agent_id='r20', out=never))}"
    args = [
        *run_args("r20", "--until-complete", "--deliver", resume),
        *fake("stop:completion", agent_id="r20"),
    ]
    assert await exited(start(args, redis_url, log), 30) == 0, log.read_text()
    async with open_bus(redis_url) as bus:
        [exit_] = [e.payload for e in await bus.of_type(GROUP, T.AGENT_EXITED)]
    assert isinstance(exit_, AgentExited) and exit_.completed
    assert not never.exists()


async def test_until_complete_needs_a_resume_command(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "adapter.log"
    adapter = start(
        [*run_args("r8", "--until-complete", "--deliver", "print"), *fake("complete")], redis_url, log
    )
    assert await exited(adapter, 20) == 2
    assert "--until-complete needs --deliver command" in log.read_text()


async def test_stdin_reads_a_saved_output_file(redis_url: str, tmp_path: Path) -> None:
    saved = tmp_path / "agent.out"
    producer = spawn(fake("progress:40", "complete", out=saved, agent_id="r9"))
    assert producer.wait(timeout=30) == 0
    log = tmp_path / "adapter.log"
    with saved.open("rb") as stdin:
        adapter = start(
            ["adapter", "stdin", "--agent-id", "r9", "--group", GROUP, "--quiet"], redis_url, log, stdin=stdin
        )
        assert await exited(adapter, 30) == 0, log.read_text()
    async with open_bus(redis_url) as bus:
        types = [e.type for e in await bus.envelopes(GROUP)]
    assert types == [T.AGENT_STARTED, T.PROGRESS, T.COMPLETION_REPORT, T.AGENT_EXITED]


async def test_a_closed_stdout_stops_the_copying_not_the_adapter(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "adapter.log"
    read_end, write_end = os.pipe()
    os.close(read_end)  # whoever watched the adapter's stdout went away
    steps = fake("say:hello there", "progress:50", "complete", agent_id="r10")
    adapter = start([*run_args("r10"), *steps], redis_url, log, stdout=write_end)
    os.close(write_end)
    assert await exited(adapter, 30) == 0, log.read_text()
    assert "stopped copying the agent's output to stdout" in log.read_text()
    async with open_bus(redis_url) as bus:
        types = [e.type for e in await bus.envelopes(GROUP)]
    assert types == [T.AGENT_STARTED, T.PROGRESS, T.COMPLETION_REPORT, T.AGENT_EXITED]


async def test_a_bad_deliver_spec_or_task_file_is_a_usage_error(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "adapter.log"
    bad_spec = start([*run_args("r11", "--deliver", "carrier-pigeon"), *fake("complete")], redis_url, log)
    assert await exited(bad_spec, 20) == 2
    missing = tmp_path / "no-such-task.md"
    no_task = start([*run_args("r11", "--task-file", str(missing)), *fake("complete")], redis_url, log)
    assert await exited(no_task, 20) == 2
    text = log.read_text()
    assert (
        "Invalid value for '--deliver': 'carrier-pigeon' is not print, file:PATH or command:'TEMPLATE'"
        in text
    )
    assert f"Invalid value for --task-file: cannot read {missing}: No such file or directory" in text
    async with open_bus(redis_url) as bus:
        assert await bus.envelopes(GROUP) == []  # refused before anything was published


async def test_stdin_refuses_a_task_read_from_stdin(redis_url: str, tmp_path: Path) -> None:
    """Both would read stdin: the whole output became the task, and none of its signals was published."""
    log = tmp_path / "adapter.log"
    producer = spawn(fake("stop", agent_id="r15"), stdout=subprocess.PIPE)
    assert producer.stdout is not None
    adapter = start(
        ["adapter", "stdin", "--agent-id", "r15", "--group", GROUP, "--quiet", "--task-file", "-"],
        redis_url,
        log,
        stdin=producer.stdout,
    )
    producer.stdout.close()
    assert await exited(adapter, 30) == 2, log.read_text()
    producer.wait(timeout=10)
    assert (
        "Invalid value for --task-file: adapter stdin reads the agent's output from stdin" in log.read_text()
    )
    async with open_bus(redis_url) as bus:
        assert await bus.envelopes(GROUP) == []


async def test_a_task_over_the_limit_is_cut_in_agent_started_and_the_cut_is_reported(
    redis_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "adapter.log"
    task = tmp_path / "task.md"
    task.write_text("t" * (MAX_TASK_CHARS + 10))
    adapter = start([*run_args("r14", "--task-file", str(task)), *fake("complete")], redis_url, log)
    assert await exited(adapter, 30) == 0, log.read_text()
    assert f"the task is {MAX_TASK_CHARS + 10} characters: AGENT_STARTED carries its first" in log.read_text()
    async with open_bus(redis_url) as bus:
        started = (await bus.envelopes(GROUP))[0].payload
    assert isinstance(started, AgentStarted)
    assert started.task == "t" * MAX_TASK_CHARS + "\n…(cut)"


async def test_a_signal_naming_another_agent_id_stays_the_adapters_and_is_reported_once(
    redis_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "adapter.log"
    steps = fake("progress:10", "progress:20", "complete", agent_id="bg-task-abc123")  # a copied example
    adapter = start([*run_args("r12", "--quiet"), *steps], redis_url, log)
    assert await exited(adapter, 30) == 0, log.read_text()
    async with open_bus(redis_url) as bus:
        envelopes = await bus.envelopes(GROUP)
    signals = [e for e in envelopes if e.kind is Kind.SIGNAL]
    assert [e.type for e in signals] == [T.PROGRESS, T.PROGRESS, T.COMPLETION_REPORT]
    assert {e.agent_id for e in envelopes} == {"r12"}  # the coordinator knows the agent as r12
    assert {getattr(e.payload, "agent_id", None) for e in signals} == {"bg-task-abc123"}  # as written
    text = log.read_text()
    assert text.count("a signal says agent_id") == 1
    assert "a signal says agent_id 'bg-task-abc123'; it is published as agent 'r12' (--agent-id)" in text


def _closing(fd: int) -> Callable[[], None]:
    return lambda: os.close(fd)


@pytest.mark.parametrize("closed", [1, 2], ids=["stdout", "stderr"])
async def test_an_adapter_started_with_stdout_or_stderr_closed_publishes_all_the_same(
    redis_url: str, tmp_path: Path, closed: int
) -> None:
    log = tmp_path / "adapter.log"
    steps = fake("say:working", "progress:20", "crash:3", agent_id="r9")
    adapter = start([*run_args("r9"), *steps], redis_url, log, preexec_fn=_closing(closed))
    assert await exited(adapter, 30) == 3
    async with open_bus(redis_url) as bus:
        envelopes = await bus.envelopes(GROUP)
    assert [e.type for e in envelopes] == [T.AGENT_STARTED, T.PROGRESS, T.STOP_WORK, T.AGENT_EXITED]


async def test_adapter_stdin_with_stdin_closed_is_a_usage_error(redis_url: str, tmp_path: Path) -> None:
    log = tmp_path / "adapter.log"
    args = ["adapter", "stdin", "--agent-id", "r9", "--group", GROUP]
    assert await exited(start(args, redis_url, log, preexec_fn=_closing(0)), 30) == 2
    assert "stdin is closed: pipe the agent's output into it" in log.read_text()


async def test_a_directive_whose_resume_turn_a_killed_adapter_cut_short_is_delivered_again(
    redis_url: str, tmp_path: Path
) -> None:
    """Acknowledged once its turn ended: killed with -9 during the turn (which then ends too), the
    adapter's next run delivers it again."""
    log, record, go = tmp_path / "adapter.log", tmp_path / "resumes", tmp_path / "go"
    resumed = fake(f"wait-file:{go}", "complete", agent_id="r15", record=record, resumed="{prompt}")
    args = [*run_args("r15", "--until-complete", "--deliver", f"command:{shlex.join(resumed)}")]
    args += fake("say:working", agent_id="r15")
    async with open_bus(redis_url) as bus:
        await _answer_waiting(bus, "r15")
        first = start(args, redis_url, log)

        async def resuming() -> bool:
            return record.exists() and "start" in record.read_text()

        await wait_until(resuming, 30, "the resume turn to start")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        go.touch()
        second = start(args, redis_url, log)
        assert await exited(second, 60) == 0, log.read_text()
        assert await bus.count(GROUP, T.COMPLETION_REPORT) == 1
        pending: Any = await bus.client.xpending(bus.inbox(GROUP, "r15"), "adapter")
        assert pending["pending"] == 0
    assert [line.split()[0] for line in record.read_text().splitlines()] == ["start", "start", "end"]
