"""``adapter watch --idle-stop`` ends the watch as a stop signal does: what the agent left half written
when the time ran out is not closed (an error) but kept in the checkpoint, and the later watch of the
file publishes it whole once it is (a real Redis, the real CLI)."""

from __future__ import annotations

from pathlib import Path

from adapter_kit import exited, open_bus, start

from bus.envelope import EnvelopeType

T = EnvelopeType
GROUP = "g-idle-stop"
HALF = "[CLARIFICATION_NEEDED]\nagent_id: i1\nblocked_at: design\n"
REST = "reason: need a choice\nquestions: [OAuth2 or JWT?]\n[/CLARIFICATION_NEEDED]\n"


async def test_a_block_half_written_at_an_idle_stop_is_published_whole_by_the_next_watch(
    redis_url: str, tmp_path: Path
) -> None:
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    out.write_text(HALF)
    args = ["adapter", "watch", str(out), "--agent-id", "i1", "--group", GROUP, "--idle-stop", "0.3"]
    args += ["--until-complete", "--deliver", "command:true", "--poll", "0.02"]
    assert await exited(start(args, redis_url, log), 30) == 0
    async with open_bus(redis_url) as bus:
        assert [e.type for e in await bus.envelopes(GROUP)] == [T.AGENT_STARTED]  # no error, no exit
    with out.open("a") as agent:
        agent.write(REST)
    assert await exited(start(args, redis_url, log), 30) == 0
    async with open_bus(redis_url) as bus:
        published = await bus.envelopes(GROUP)
    assert [e.type for e in published] == [T.AGENT_STARTED, T.CLARIFICATION_NEEDED]
    assert "not terminated" not in log.read_text()


async def test_a_result_report_that_ends_the_file_is_published_at_an_idle_stop(
    redis_url: str, tmp_path: Path
) -> None:
    # In text only the next heading or tag ends a report, and a quiet agent writes none: kept in the
    # checkpoint, it was published by no later watch either.
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    out.write_text("## QA Result\n### Status\nSUCCESS\n### Summary\nall good\n")
    args = ["adapter", "watch", str(out), "--agent-id", "i2", "--group", GROUP, "--idle-stop", "0.3"]
    assert await exited(start([*args, "--poll", "0.02"], redis_url, log), 30) == 0, log.read_text()
    async with open_bus(redis_url) as bus:
        assert [e.type for e in await bus.envelopes(GROUP)] == [T.AGENT_STARTED, T.RESULT]
