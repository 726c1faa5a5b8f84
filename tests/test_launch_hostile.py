"""Launch requests a launcher cannot start as they are: a task too long for a command line, an id the
adapter would refuse."""

from __future__ import annotations

from pathlib import Path

import pytest
from adapter_kit import exited, open_bus, start, stream_fields
from test_launcher import GROUP

from bus.directives import LaunchReason, LaunchRequest
from bus.envelope import new_envelope
from bus.keys import StreamKind, dead_stream_for
from bus.publisher import Publisher


async def test_a_task_too_long_for_prompt_is_dead_lettered_at_once_with_a_hint(
    redis_url: str, tmp_path: Path
) -> None:
    long = LaunchRequest(
        request_id="req-long",
        new_agent_id="agent-long",
        reason=LaunchReason.DELEGATION,
        task="Audit this module. " * 20_000,  # 380 kB: over Linux's 128 kB limit for one argument
    )
    log = tmp_path / "launcher.log"
    async with open_bus(redis_url) as bus:
        await Publisher(bus.client, bus.keys).publish(
            new_envelope(long, agent_id=long.new_agent_id, group_id=GROUP), StreamKind.TASKS
        )
        args = ["launcher", "--command", "echo {prompt}", "--prompt-dir", str(tmp_path / "prompts"),
                "--log-dir", str(tmp_path / "logs"), "--max-attempts", "3", "--reclaim-ms", "50", "--burst"]  # fmt: skip
        assert await exited(start(args, redis_url, log), 60) == 1, log.read_text()  # dead-lettered
        tasks = bus.stream(GROUP, StreamKind.TASKS)
        [dead] = await stream_fields(bus.client, dead_stream_for(tasks))
        pending = await bus.client.xpending(tasks, "launchers")
    reason = dead[b"reason"].decode()
    assert reason.startswith("cannot start agent agent-long: [Errno 7] Argument list too long")
    assert "pass {prompt_file} instead" in reason
    assert dead[b"deliveries"] == b"1"  # no retry: the same request is as long the next time
    assert log.read_text().count("cannot start agent agent-long") == 1
    assert pending["pending"] == 0


@pytest.mark.parametrize(
    ("agent_id", "reason"),
    [
        (
            "evil\nagent",
            "the agent id 'evil\\nagent' of the launch request must not contain control characters (a "
            "newline, a tab...)",
        ),
        ("x" * 100_000, f"the agent id '{'x' * 78}… of the launch request must be at most 256 characters"),
    ],
)
async def test_a_request_for_an_agent_id_the_adapter_would_refuse_is_dead_lettered(
    redis_url: str, tmp_path: Path, agent_id: str, reason: str
) -> None:
    bad = LaunchRequest(request_id="req-bad", new_agent_id=agent_id, reason=LaunchReason.DELEGATION, task="t")
    log = tmp_path / "launcher.log"
    async with open_bus(redis_url) as bus:
        await Publisher(bus.client, bus.keys).publish(
            new_envelope(bad, agent_id="someone", group_id=GROUP), StreamKind.TASKS
        )
        args = ["launcher", "--command", "true {prompt}", "--prompt-dir", str(tmp_path / "prompts"),
                "--log-dir", str(tmp_path / "logs"), "--burst"]  # fmt: skip
        assert await exited(start(args, redis_url, log), 60) == 1, log.read_text()  # dead-lettered
        [dead] = await stream_fields(bus.client, dead_stream_for(bus.stream(GROUP, StreamKind.TASKS)))
    assert dead[b"reason"].decode() == reason
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())  # nothing started
