"""``adapter watch``: a real adapter process tails a file a real (fake) agent writes, on a real Redis.

Killed with SIGKILL and restarted, it neither loses nor repeats a signal; truncation and replacement
start a new generation with new ids; a Claude Code transcript publishes the assistant's signals only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
import redis
from adapter_kit import Bus, exited, fake, open_bus, run_ok, spawn, start, wait_until
from faults.proxy import ReplyDroppingProxy

from agents.adapter import AgentBus, connect_bus
from agents.identity import build_prompt
from agents.output_stream import OutputStream
from agents.parser import ErrorItem, SignalItem, parse_text
from agents.transcript import TranscriptParser
from agents.until_complete import AFTER_RESULT_S
from agents.watch import FileWatch, WatchOptions
from agents.watched_file import canonical, source_of
from bus.directives import AnswerItem, ClarificationResponse
from bus.envelope import Envelope, EnvelopeType, Kind, deterministic_id, new_envelope
from bus.publisher import Publisher
from bus.results import ResultReport
from bus.settings import Settings
from bus.signals import StopReason, StopWork

T = EnvelopeType
GROUP = "g-watch"
DATA = Path(__file__).parent / "data"


def watch_args(path: Path, agent: str, *extra: str) -> list[str]:
    return ["adapter", "watch", str(path), "--agent-id", agent, "--group", GROUP, *extra]


def expected_ids(path: Path, agent: str, fmt: str, generation: int = 0) -> list[str]:
    data = path.read_bytes()
    if fmt == "jsonl":
        parser = TranscriptParser()
        items = parser.feed(data) + parser.close()
    else:
        items = parse_text(data)
    source = source_of(canonical(path), generation)
    return [deterministic_id(agent, source, item.offset) for item in items if not isinstance(item, ErrorItem)]


async def agent_output(bus: Bus) -> list[str]:
    """Ids of what the agent itself said (signals and results), in stream order."""
    return [e.id for e in await bus.envelopes(GROUP) if e.kind in (Kind.SIGNAL, Kind.RESULT)]


async def test_until_complete_ends_with_a_stop_that_reports_completion(
    redis_url: str, tmp_path: Path
) -> None:
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    assert spawn(fake("say:working", "stop:completion", out=out, agent_id="a20")).wait(timeout=30) == 0
    assert await exited(start(watch_args(out, "a20", "--until-complete"), redis_url, log), 30) == 0, (
        log.read_text()
    )


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
async def test_sigkill_and_restart_lose_and_repeat_nothing(redis_url: str, tmp_path: Path, fmt: str) -> None:
    out, go = tmp_path / "agent.out", tmp_path / "go"
    steps = ("many:10", f"wait-file:{go}", "many:20", "complete")
    agent = spawn(fake(*steps, out=out, format=fmt, agent_id="a1", pace=0.01), stderr=subprocess.DEVNULL)
    log = tmp_path / "adapter.log"
    first = start(watch_args(out, "a1", "--until-complete", "--heartbeat", "0.2"), redis_url, log)
    async with open_bus(redis_url) as bus:

        async def first_part_published() -> bool:
            return await bus.count(GROUP, T.PROGRESS) >= 10

        await wait_until(first_part_published, 30, "the first ten signals")
        go.touch()  # the agent writes on while its adapter is killed
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        assert len(await agent_output(bus)) < 31  # killed mid-way
        assert await exited(agent, 60) == 0
        second = start(watch_args(out, "a1", "--until-complete"), redis_url, log)
        assert await exited(second, 60) == 0, log.read_text()
        published = await agent_output(bus)
        expected = expected_ids(out, "a1", fmt)
        assert len(expected) == 31
        assert Counter(published) == Counter(expected)  # every signal, each exactly once
        assert published == expected  # in the agent's order
        types = Counter(e.type for e in await bus.envelopes(GROUP))
        assert types[T.AGENT_STARTED] == 1
        assert types[T.AGENT_EXITED] == 1
        assert types[T.COMPLETION_REPORT] == 1


async def test_a_lost_checkpoint_republishes_with_the_same_ids(bus_url: str, tmp_path: Path) -> None:
    out = tmp_path / "agent.out"
    await run_ok(fake("say:hello", "progress:10", "clarify", "complete", out=out, agent_id="a2"))
    log = tmp_path / "adapter.log"
    async with open_bus(bus_url) as bus:
        first = start(watch_args(out, "a2", "--until-complete"), bus_url, log)
        assert await exited(first, 30) == 0, log.read_text()
        before = [e for e in await bus.envelopes(GROUP) if e.kind is Kind.SIGNAL]
        keys = [k async for k in bus.client.scan_iter(match=b"*offset:a2:*")]
        assert len(keys) == 1
        await bus.client.delete(*keys)  # as if the adapter died between publishing and checkpointing
        second = start(watch_args(out, "a2", "--until-complete"), bus_url, log)
        assert await exited(second, 30) == 0, log.read_text()
        after = [e for e in await bus.envelopes(GROUP) if e.kind is Kind.SIGNAL][len(before) :]
        assert [e.id for e in after] == [e.id for e in before]  # recognisable downstream as repeats
        assert [e.payload for e in after] == [e.payload for e in before]
        assert [e.type for e in before] == [T.PROGRESS, T.CLARIFICATION_NEEDED, T.COMPLETION_REPORT]


async def test_a_completed_file_watched_again_says_a_resumed_turn_there_is_not_followed(
    redis_url: str, tmp_path: Path
) -> None:
    """A known limit, said rather than left silent: the completion is in the checkpoint, so the second
    adapter ends at once (an agent resumed in the same file after its COMPLETION_REPORT is not followed)."""
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    await run_ok(fake("progress:10", "complete", out=out, agent_id="a13"))
    first = start(watch_args(out, "a13", "--until-complete"), redis_url, log)
    assert await exited(first, 30) == 0, log.read_text()
    assert "not followed" not in log.read_text()
    second = start(watch_args(out, "a13", "--until-complete"), redis_url, log)
    assert await exited(second, 30) == 0, log.read_text()
    assert "what a resumed turn writes to this file is not followed" in log.read_text()


@pytest.mark.parametrize("wait", [True, False])
async def test_with_wait_for_redis_a_blip_after_connecting_is_waited_out(
    redis_url: str, tmp_path: Path, wait: bool
) -> None:
    """The connection drops as the checkpoint is read: with --wait-for-redis the adapter reads it again
    (a hook's adapter that exited there, which nobody restarts, never published its agent's output);
    without, it exits 1 as at any outage when it starts."""
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    await run_ok(fake("progress:10", "complete", out=out, agent_id="a14"))
    port = urlsplit(redis_url).port
    assert port is not None
    proxy = ReplyDroppingProxy("127.0.0.1", port, b"offset:")
    await proxy.start()
    try:
        extra = ["--wait-for-redis"] if wait else []
        watcher = start(watch_args(out, "a14", "--until-complete", *extra), proxy.url, log)
        assert await exited(watcher, 30) == (0 if wait else 1), log.read_text()
    finally:
        await proxy.close()
    assert proxy.dropped_reply is not None
    assert ("retrying in 0.2s" in log.read_text()) is wait
    async with open_bus(redis_url) as bus:
        assert await bus.count(GROUP, T.COMPLETION_REPORT) == (1 if wait else 0)


async def test_a_restart_that_spells_the_path_otherwise_resumes(redis_url: str, tmp_path: Path) -> None:
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    await run_ok(fake("say:hello", "progress:10", "complete", out=out, agent_id="a5"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to(tmp_path, target_is_directory=True)
    async with open_bus(redis_url) as bus:
        for spelled in (out, tmp_path / "sub" / ".." / "agent.out", tmp_path / "link" / "agent.out"):
            watcher = start(watch_args(spelled, "a5", "--until-complete"), redis_url, log)
            assert await exited(watcher, 30) == 0, log.read_text()
        types = Counter(e.type for e in await bus.envelopes(GROUP))
        assert (types[T.PROGRESS], types[T.COMPLETION_REPORT]) == (1, 1), types


async def test_a_report_that_ends_the_file_completes_the_agent_once_nothing_follows(
    redis_url: str, tmp_path: Path
) -> None:
    """In text a report ends at the next heading, which never comes when the report is the output's last
    word: with ``--until-complete`` it is published, and the adapter ends, once the file stays quiet."""
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    out.write_text("## Tester Result\n\n### Status\nSUCCESS\n\n### Summary\nAll good.\n")
    async with open_bus(redis_url) as bus:
        for _ in range(2):  # and a restart publishes it no more
            watcher = start(watch_args(out, "a6", "--until-complete", "--format", "text"), redis_url, log)
            assert await exited(watcher, 30) == 0, log.read_text()
        [result] = await bus.of_type(GROUP, T.RESULT)
        assert isinstance(result.payload, ResultReport) and result.payload.summary == "All good."
        assert await bus.count(GROUP, T.STOP_WORK) == 0


async def test_a_signal_whose_closing_tag_ends_the_file_without_a_newline_is_published(
    redis_url: str, tmp_path: Path
) -> None:
    """The agent waits for its answer: the adapter must not wait for a newline that never comes. What
    the agent writes later on that line is nothing, and the ids are those of the whole file."""
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    stop = "[STOP_WORK]\nagent_id: a8\nstop_reason: blocker\nblocker_type: missing_info\ndetails: key\n"
    out.write_text(stop + "[/STOP_WORK]")
    watcher = start(watch_args(out, "a8"), redis_url, log)
    try:
        async with open_bus(redis_url) as bus:
            await wait_until(lambda: bus.has(GROUP, T.STOP_WORK), 20, "the STOP_WORK")
            with out.open("a") as more:
                more.write(" (waiting)\n[PROGRESS]\nagent_id: a8\npercent: 5\n[/PROGRESS]\n")
            await wait_until(lambda: bus.has(GROUP, T.PROGRESS), 20, "the PROGRESS")
            assert await agent_output(bus) == expected_ids(out, "a8", "text")
    finally:
        watcher.terminate()
        assert await exited(watcher, 30) == 0, log.read_text()
    assert "not published" not in log.read_text()


async def test_a_checkpoint_named_by_the_path_as_given_goes_on_under_that_name(
    redis_url: str, tmp_path: Path
) -> None:
    """A checkpoint written before files were named by their directory's real path (through a link
    here) is taken up by that name: the file is not published again under new ids."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    given, log = tmp_path / "link" / "agent.out", tmp_path / "adapter.log"
    await run_ok(fake("progress:10", out=given, agent_id="a8"))
    async with open_bus(redis_url) as bus:
        first = start(watch_args(given, "a8"), redis_url, log)

        async def published() -> bool:
            return await bus.count(GROUP, T.PROGRESS) == 1

        await wait_until(published, 30, "the first signal")
        first.send_signal(signal.SIGTERM)
        assert await exited(first, 30) == 0, log.read_text()
        [key] = [k async for k in bus.client.scan_iter(match=b"*offset:a8:*")]
        digest = hashlib.sha256(str(canonical(given)).encode()).hexdigest()[:16]
        old = hashlib.sha256(str(given.absolute()).encode()).hexdigest()[:16]
        await bus.client.rename(
            key, key.replace(digest.encode(), old.encode())
        )  # as an older version named it
        await run_ok(fake("progress:20", "complete", out=given, agent_id="a8"))
        second = start(watch_args(given, "a8", "--until-complete"), redis_url, log)
        assert await exited(second, 30) == 0, log.read_text()
        signals = [e for e in await bus.envelopes(GROUP) if e.kind is Kind.SIGNAL]
        assert [e.type for e in signals] == [T.PROGRESS, T.PROGRESS, T.COMPLETION_REPORT]
        assert {e.source for e in signals[1:]} == {f"file:{given.absolute()}"}


def test_a_path_is_named_by_its_directory_s_real_path_and_its_own_name(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "dir").symlink_to(tmp_path / "real", target_is_directory=True)
    (tmp_path / "real" / "file.link").symlink_to(tmp_path / "real" / "a.log")
    real = tmp_path.resolve() / "real"
    assert canonical(tmp_path / "dir" / ".." / "real" / "a.log") == real / "a.log"
    assert canonical(tmp_path / "dir" / "a.log") == real / "a.log"
    assert canonical(tmp_path / "dir" / "file.link") == real / "file.link"  # followed by its name
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert canonical(tmp_path / "loop" / "a.log") == tmp_path.absolute() / "loop" / "a.log"


async def test_waits_for_a_file_that_does_not_exist_yet(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "later" / "agent.out"
    log = tmp_path / "adapter.log"
    adapter = start(watch_args(out, "a3", "--until-complete"), redis_url, log)
    async with open_bus(redis_url) as bus:

        async def waiting() -> bool:  # the directory appears only after the adapter said so
            return "waiting for" in log.read_text()

        await wait_until(waiting, 10, "the adapter to wait for the file")
        assert adapter.poll() is None
        out.parent.mkdir()
        await run_ok(fake("progress:50", "complete", out=out, agent_id="a3"))
        assert await exited(adapter, 30) == 0, log.read_text()
        assert [e.type for e in await bus.envelopes(GROUP) if e.kind is Kind.SIGNAL] == [
            T.PROGRESS,
            T.COMPLETION_REPORT,
        ]
    said = log.read_text()
    assert said.count(f"waiting for {out}: it does not exist yet (nor its directory {out.parent})") == 1


@pytest.mark.parametrize("how", ["truncate", "replace", "rewrite"])
async def test_truncated_or_replaced_file_is_a_new_generation(
    redis_url: str, tmp_path: Path, how: str
) -> None:
    out = tmp_path / "agent.out"
    await run_ok(fake("say:first run", "progress:10", out=out, agent_id="a4"))
    log = tmp_path / "adapter.log"
    adapter = start(watch_args(out, "a4", "--until-complete"), redis_url, log)
    async with open_bus(redis_url) as bus:

        async def first_seen() -> bool:
            return await bus.count(GROUP, T.PROGRESS) == 1

        await wait_until(first_seen, 20, "the first run's signal")
        if how == "truncate":
            with out.open("r+b") as stream:
                stream.truncate(0)

            async def noticed() -> bool:
                return "was truncated" in log.read_text()

            await wait_until(noticed, 10, "the adapter to notice the truncation")
            await run_ok(fake("progress:10", "complete", out=out, agent_id="a4"))
        else:
            new = tmp_path / "agent.new"
            await run_ok(fake("say:second run!", "progress:10", "complete", out=new, agent_id="a4"))
            if how == "replace":
                os.replace(new, out)
            else:  # in place, as `agent > out` run again does: longer than what was read
                assert new.stat().st_size > out.stat().st_size
                out.write_bytes(new.read_bytes())
        assert await exited(adapter, 30) == 0, log.read_text()
        signals = [e for e in await bus.envelopes(GROUP) if e.kind is Kind.SIGNAL]
        assert [e.type for e in signals] == [T.PROGRESS, T.PROGRESS, T.COMPLETION_REPORT]
        assert signals[0].source == f"file:{out}"
        assert {e.source for e in signals[1:]} == {f"file:{out}#1"}
        assert signals[1].id != signals[0].id  # same offset or not, a new generation has new ids
        assert [e.id for e in signals[1:]] == expected_ids(out, "a4", "text", generation=1)
    said = log.read_text()
    if how == "rewrite":  # or "was truncated", should it look between the truncation and the write
        assert "no longer holds the bytes already read" in said or "was truncated" in said
    else:
        assert ("was truncated" if how == "truncate" else "was replaced") in said
    assert "generation 1" in said


async def test_a_file_replaced_by_a_shorter_one_is_said_to_be_replaced(
    redis_url: str, tmp_path: Path
) -> None:
    out, new, log = tmp_path / "agent.out", tmp_path / "agent.new", tmp_path / "adapter.log"
    await run_ok(fake(f"say:{'long first run ' * 40}", "progress:10", out=out, agent_id="a9"))
    adapter = start(watch_args(out, "a9", "--until-complete"), redis_url, log)
    async with open_bus(redis_url) as bus:
        await wait_until(lambda: bus.has(GROUP, T.PROGRESS), 20, "the first run's signal")
        await run_ok(fake("complete", out=new, agent_id="a9"))
        assert new.stat().st_size < out.stat().st_size
        os.replace(new, out)
        assert await exited(adapter, 30) == 0, log.read_text()
    said = log.read_text()
    assert "was replaced by another file" in said and "truncated" not in said


async def test_a_path_that_is_a_directory_for_a_while_is_waited_for_like_a_deleted_file(
    redis_url: str, tmp_path: Path
) -> None:
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    await run_ok(fake("progress:10", out=out, agent_id="a7"))
    beating = ("--heartbeat", "0.1", "--pid", str(os.getpid()))  # a beat while this process lives
    adapter = start(watch_args(out, "a7", "--until-complete", *beating), redis_url, log)
    async with open_bus(redis_url) as bus:

        async def beats(n: int) -> bool:
            return await bus.count(GROUP, T.HEARTBEAT) >= n

        await wait_until(lambda: beats(1), 20, "the adapter to follow the file")
        out.unlink()
        out.mkdir()
        seen = await bus.count(GROUP, T.HEARTBEAT)
        await wait_until(lambda: beats(seen + 5), 20, "the adapter to go on past the directory")
        assert adapter.poll() is None, log.read_text()
        out.rmdir()
        new = tmp_path / "agent.new"
        await run_ok(fake("progress:20", "complete", out=new, agent_id="a7"))
        os.replace(new, out)
        assert await exited(adapter, 30) == 0, log.read_text()
        assert await bus.count(GROUP, T.COMPLETION_REPORT) == 1


async def test_claude_transcript_publishes_only_the_assistants_signals(
    redis_url: str, tmp_path: Path
) -> None:
    transcript = (DATA / "claude_transcript.jsonl").read_bytes()
    out = tmp_path / "output-agent.jsonl"
    argv_file = tmp_path / "argv.json"
    writer = f"{sys.executable} -c 'import json,sys; open(sys.argv[1],\"w\").write(json.dumps(sys.argv[2:]))'"
    template = f"command:{writer} {argv_file} {{session_id}} {{type}}"
    log = tmp_path / "adapter.log"
    adapter = start(
        watch_args(out, "a5", "--format", "claude-jsonl", "--deliver", template, "--retry-ms", "100"),
        redis_url,
        log,
    )
    last = transcript.rindex(b"\n", 0, len(transcript) - 1) + 1  # its last line completes the agent
    async with open_bus(redis_url) as bus:
        # written in pieces cut inside JSON lines, as a live agent would
        for start_at in range(0, last, 777):
            with out.open("ab") as stream:
                stream.write(transcript[start_at : min(start_at + 777, last)])

        await wait_until(lambda: bus.has(GROUP, T.CLARIFICATION_NEEDED), 30, "the question")
        response = ClarificationResponse(answers=[AnswerItem(question_id="Q1", answer="both")])
        directive = new_envelope(response, agent_id="a5", group_id=GROUP, source="test")
        await Publisher(bus.client, bus.keys).send_directive(directive)

        async def delivered() -> bool:
            return argv_file.exists()

        await wait_until(delivered, 30, "the resume command")
        session = orjson.loads(transcript.splitlines()[0])["sessionId"]
        assert orjson.loads(argv_file.read_bytes()) == [session, "CLARIFICATION_RESPONSE"]
        with out.open("ab") as stream:
            stream.write(transcript[last:])

        async def result_seen() -> bool:
            return await bus.has(GROUP, T.COMPLETION_REPORT)

        await wait_until(result_seen, 30, "the completion report")
        said = [e.type for e in await bus.envelopes(GROUP) if e.kind in (Kind.SIGNAL, Kind.RESULT)]
        # the user prompt's templates, the tool input and the tool result are not the agent's output
        assert said == [T.CLARIFICATION_NEEDED, T.PROGRESS, T.RESULT, T.COMPLETION_REPORT]
    adapter.send_signal(signal.SIGTERM)
    assert await exited(adapter, 20) == 0
    assert "delivered CLARIFICATION_RESPONSE" in log.read_text()


async def test_an_unreadable_signal_is_a_stop_work_error_in_its_place(redis_url: str, tmp_path: Path) -> None:
    # the agent may wait for a reply to it: the parent must see a blocker, not a running agent
    out = tmp_path / "agent.out"
    broken_progress = "[PROGRESS]\nagent_id: a6\npercent: lots\n[/PROGRESS]\n"  # nothing waits on it
    echoed = build_prompt("Do it", "a6")  # its templates are no signals, broken or not
    out.write_text(
        f"[STOP_WORK]\nagent_id: a6\nstop_reason: nonsense\n[/STOP_WORK]\n{broken_progress}{echoed}"
    )
    await run_ok(fake("complete", out=out, agent_id="a6"))
    log = tmp_path / "adapter.log"
    adapter = start(watch_args(out, "a6", "--until-complete"), redis_url, log)
    assert await exited(adapter, 30) == 0
    async with open_bus(redis_url) as bus:
        signals = [e for e in await bus.envelopes(GROUP) if e.kind is Kind.SIGNAL]
    assert [e.type for e in signals] == [T.STOP_WORK, T.COMPLETION_REPORT]
    lost = signals[0].payload
    assert isinstance(lost, StopWork) and lost.stop_reason is StopReason.ERROR
    assert lost.details.startswith(
        "The agent printed a STOP_WORK (line 1) that did not reach the coordinator: "
    )
    assert "field 'stop_reason'" in lost.details
    assert "The agent waits for a reply: resolve this" in lost.details
    assert signals[0].id == deterministic_id("a6", source_of(out.absolute(), 0), 0)  # where the block was
    said = log.read_text()
    assert "line 1: not published: STOP_WORK block at line 1" in said
    assert "line 5: not published: PROGRESS block at line 5" in said


def test_signal_items_have_offsets() -> None:
    """The id scheme the tests above rely on: an item's offset is where its block starts."""
    items = parse_text(b"prose\n[PROGRESS]\nagent_id: a\npercent: 5\n[/PROGRESS]\n")
    assert isinstance(items[0], SignalItem)
    assert items[0].offset == 6


async def test_with_a_pid_it_beats_while_the_agent_lives_and_reports_its_exit(
    redis_url: str, tmp_path: Path
) -> None:
    out, go = tmp_path / "agent.out", tmp_path / "go"
    agent = spawn(fake("many:3", f"wait-file:{go}", "many:2", out=out, agent_id="a1", pace=0.01))
    log = tmp_path / "adapter.log"
    args = watch_args(out, "a1", "--pid", str(agent.pid), "--heartbeat", "0.2")
    watcher = start(args, redis_url, log)
    try:
        async with open_bus(redis_url) as bus:

            async def beating() -> bool:
                return await bus.count(GROUP, T.PROGRESS) >= 3 and await bus.has(GROUP, T.HEARTBEAT, 2)

            await wait_until(beating, 30, "three signals and two heartbeats")
            assert await bus.count(GROUP, T.AGENT_EXITED) == 0  # the agent still runs
            go.touch()
            assert await exited(agent, 30) == 0  # reaped: a zombie would still count as running
            assert await exited(watcher, 30) == 0, log.read_text()
            envelopes = await bus.envelopes(GROUP)
    finally:
        for process in (agent, watcher):
            if process.poll() is None:
                process.kill()
    beats = [e.payload for e in envelopes if e.type is T.HEARTBEAT]
    assert beats and all(beat.pid == agent.pid for beat in beats)  # type: ignore[union-attr]
    assert [e.type for e in envelopes if e.type is not T.HEARTBEAT] == [
        T.AGENT_STARTED, *[T.PROGRESS] * 5, T.AGENT_EXITED,
    ]  # fmt: skip


def _resume_recorder(tmp_path: Path, go: Path) -> tuple[str, Path]:
    """A --deliver command that records whether ``go`` (touched to end the agent's turn) existed."""
    ran = tmp_path / "ran"
    code = "import os, sys; open(sys.argv[1], 'a').write(f'{os.path.exists(sys.argv[2])} {sys.argv[3]}\\n')"
    return f'command:{sys.executable} -c "{code}" {ran} {go} {{type}}', ran


@pytest.mark.parametrize("completes", [False, True])
async def test_with_a_pid_a_resume_command_waits_for_the_turn_and_none_follows_a_completion(
    redis_url: str, tmp_path: Path, completes: bool
) -> None:
    out, go, log = tmp_path / "agent.out", tmp_path / "go", tmp_path / "adapter.log"
    steps = ("many:1", *(["complete"] if completes else []), f"wait-file:{go}")
    agent = spawn(fake(*steps, out=out, agent_id="a8"))
    template, ran = _resume_recorder(tmp_path, go)
    args = watch_args(out, "a8", "--pid", str(agent.pid), "--heartbeat", "0.1", "--deliver", template)
    watcher = start(args, redis_url, log)
    async with open_bus(redis_url) as bus:
        await wait_until(lambda: bus.has(GROUP, T.PROGRESS), 30, "the agent's progress")
        response = ClarificationResponse(answers=[AnswerItem(question_id="Q1", answer="both")])
        directive = new_envelope(response, agent_id="a8", group_id=GROUP, source="test")
        await Publisher(bus.client, bus.keys).send_directive(directive)

        async def taken() -> bool:
            try:
                pending: Any = await bus.client.xpending(bus.inbox(GROUP, "a8"), "adapter")
            except redis.exceptions.ResponseError:  # NOGROUP: the adapter has not made its group yet
                return False
            return bool(pending["pending"])

        await wait_until(taken, 30, "the adapter to take the directive")
        beats = await bus.count(GROUP, T.HEARTBEAT)
        await wait_until(lambda: bus.has(GROUP, T.HEARTBEAT, beats + 3), 30, "three more heartbeats")
        assert not ran.exists()  # the turn still runs: not resumed beside it
        go.touch()
        assert await exited(agent, 30) == 0
        assert await exited(watcher, 30) == 0, log.read_text()
    if completes:
        assert not ran.exists()
        assert "not delivered: the agent has completed" in log.read_text()
    else:
        assert ran.read_text() == "True CLARIFICATION_RESPONSE\n"


def _assistant(text: str) -> bytes:
    entry = {"type": "assistant", "sessionId": "s1", "message": {"content": [{"type": "text", "text": text}]}}
    return orjson.dumps(entry) + b"\n"


_PROGRESS = "".join(f"[PROGRESS]\nagent_id: a7\npercent: {p}\n[/PROGRESS]\n" for p in (10, 20, 30))
_UNREAD = "## Auditor Results\n\n### Status\nSUCCESS\n\n### Summary\nReviewed the auth module.\n"
_COMPLETION = _assistant(
    "[COMPLETION_REPORT]\nagent_id: a7\ntimestamp: 2026-01-11T10:00:00Z\nstatus: success\n"
    "deliverables: none\nsummary: Reviewed the auth module\n[/COMPLETION_REPORT]"
)


async def _killed_after_progress(redis_url: str, tmp_path: Path, head: bytes, tail: bytes) -> list[Envelope]:
    """The agent's signals when its adapter is killed once ``head`` (three progress signals last) is
    checkpointed, and a new one follows ``tail`` to the agent's completion."""
    args = ("--format", "claude-jsonl")
    out, log = tmp_path / "agent.jsonl", tmp_path / "adapter.log"
    out.write_bytes(head + _assistant(_PROGRESS))
    async with open_bus(redis_url) as bus:
        first = start(watch_args(out, "a7", *args), redis_url, log)

        async def progress_published() -> bool:
            return await bus.count(GROUP, T.PROGRESS) == 3

        await wait_until(progress_published, 30, "the progress signals")  # checkpointed with them
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        with out.open("ab") as stream:
            stream.write(tail)
        second = start(watch_args(out, "a7", "--until-complete", *args), redis_url, log)
        assert await exited(second, 60) == 0, log.read_text()
        signals = [e for e in await bus.envelopes(GROUP) if e.kind is Kind.SIGNAL]
    parser = TranscriptParser()  # the same items, with the same ids, as one reading of the whole output
    items = [i for i in parser.feed(out.read_bytes()) + parser.close() if isinstance(i, SignalItem)]
    ids = [deterministic_id("a7", source_of(out.absolute(), 0), item.offset) for item in items]
    assert [e.id for e in signals if e.type is not T.STOP_WORK] == ids
    return signals


async def test_an_api_error_in_an_interactive_transcript_is_a_stop_work_error_once(
    redis_url: str, tmp_path: Path
) -> None:
    """Claude Code ends a turn on an API error with an assistant entry flagged ``isApiErrorMessage`` (an
    interactive session writes no ``result``): the coordinator is told the agent stopped, once, though a
    restarted adapter reads that entry again (the last assistant text is where a reading resumes)."""
    text = 'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    api_error = {
        "type": "assistant",
        "sessionId": "s1",
        "isApiErrorMessage": True,
        "message": {"role": "assistant", "model": "<synthetic>", "content": [{"type": "text", "text": text}]},
    }
    args = ("--format", "claude-jsonl")
    out, log = tmp_path / "agent.jsonl", tmp_path / "adapter.log"
    out.write_bytes(_assistant(_PROGRESS) + orjson.dumps(api_error) + b"\n")
    async with open_bus(redis_url) as bus:
        first = start(watch_args(out, "a7", *args), redis_url, log)
        await wait_until(lambda: bus.has(GROUP, T.STOP_WORK), 30, "the failed turn")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        prompted = {"type": "user", "sessionId": "s1", "message": {"role": "user", "content": "Go on."}}
        with out.open("ab") as stream:
            stream.write(orjson.dumps(prompted) + b"\n" + _COMPLETION)
        second = start(watch_args(out, "a7", "--until-complete", *args), redis_url, log)
        assert await exited(second, 60) == 0, log.read_text()
        signals = [e for e in await bus.envelopes(GROUP) if e.kind is Kind.SIGNAL]
    assert [e.type for e in signals] == [T.PROGRESS] * 3 + [T.STOP_WORK, T.COMPLETION_REPORT]
    stop = signals[3].payload
    assert isinstance(stop, StopWork) and stop.stop_reason is StopReason.ERROR
    assert stop.details == f"The agent's turn failed: Claude Code's request to the API failed: {text}"
    parser = TranscriptParser()
    [failed] = [i for i in parser.feed(out.read_bytes()) + parser.close() if i.line == 2]
    assert signals[3].id == deterministic_id("a7", source_of(out.absolute(), 0), failed.offset)


async def test_a_section_held_in_a_transcript_is_held_again_after_a_sigkill(
    redis_url: str, tmp_path: Path
) -> None:
    """A result report under another heading is held until the agent ends (agents.unread). An adapter
    killed after it checkpointed past that section's line restarts from the line, not after it: the
    section is held again, and the agent's completion names it (a lost result), as without the kill."""
    head = _assistant("Starting.") + _assistant(_UNREAD)
    signals = await _killed_after_progress(redis_url, tmp_path, head, _COMPLETION)
    assert [e.type for e in signals] == [T.PROGRESS] * 3 + [T.STOP_WORK, T.COMPLETION_REPORT]
    lost = signals[3].payload
    assert (
        isinstance(lost, StopWork)
        and "the section '## Auditor Results' reads as a result report" in lost.details
    )


async def test_a_stream_json_result_is_not_read_again_after_a_sigkill(redis_url: str, tmp_path: Path) -> None:
    """``claude -p --output-format stream-json`` ends a turn with a ``result`` entry repeating its last
    message. An adapter killed after it checkpointed that message restarts from the message's line, not
    after it: the result that comes next is known for a repeat, not published a second time."""
    repeat = orjson.dumps({"type": "result", "subtype": "success", "result": _PROGRESS, "session_id": "s1"})
    signals = await _killed_after_progress(
        redis_url, tmp_path, _assistant("Starting."), repeat + b"\n" + _COMPLETION
    )
    assert [e.type for e in signals] == [T.PROGRESS] * 3 + [T.COMPLETION_REPORT]


async def test_a_recap_after_a_report_is_no_lost_result_after_a_sigkill(
    redis_url: str, tmp_path: Path
) -> None:
    """A section under another heading after a report is a recap, not a report to hold: a restarted
    adapter knows a report came before, from its checkpoint."""
    broken = "## Explorer Result\n\n### Status\nMAYBE\n\n### Summary\nLooked around.\n"  # meant as one
    signals = await _killed_after_progress(
        redis_url, tmp_path, _assistant(broken), _assistant(_UNREAD) + _COMPLETION
    )
    assert [e.type for e in signals] == [T.STOP_WORK] + [T.PROGRESS] * 3 + [T.COMPLETION_REPORT]
    lost = signals[0].payload
    assert isinstance(lost, StopWork) and "status 'MAYBE' is not SUCCESS" in lost.details


async def test_the_completion_report_after_a_result_report_is_followed_after_a_restart(
    redis_url: str, tmp_path: Path
) -> None:
    """A result report completes the agent, but its prompt asks for a COMPLETION_REPORT after it:
    ``--until-complete`` follows the file for it (here after a restart, from a checkpoint that has the
    report) instead of stopping at the report."""
    report = "## Explorer Result\n\n### Status\nSUCCESS\n\n### Summary\nLooked around.\n"
    signals = await _killed_after_progress(redis_url, tmp_path, _assistant(report), _COMPLETION)
    assert [e.type for e in signals] == [T.PROGRESS] * 3 + [T.COMPLETION_REPORT]


async def test_sigusr1_publishes_the_file_to_its_end_then_stops_without_an_exit(
    redis_url: str, tmp_path: Path
) -> None:
    # what the Task hook sends the adapter of an agent resumed with another output file
    output, log = tmp_path / "out.md", tmp_path / "adapter.log"
    output.write_text("Working...\n")
    adapter = start([*watch_args(output, "w-fin", "--until-complete", "--poll", "2")], redis_url, log)
    async with open_bus(redis_url) as bus:

        async def started() -> bool:
            return await bus.has(GROUP, T.AGENT_STARTED)

        await wait_until(started, 20, "the adapter to follow the file")
        with output.open("a") as out:  # written as the signal comes, read at the adapter's next poll
            out.write("[PROGRESS]\nagent_id: w-fin\npercent: 50\nmessage: half\n[/PROGRESS]\n")
            out.write("[PROGRESS]\nagent_id: w-fin\npercent: 60\n[/PROGRESS]")  # its line ends with the file
        adapter.send_signal(signal.SIGUSR1)
        assert await exited(adapter, 20) == 0, log.read_text()
        types = [e.type for e in await bus.envelopes(GROUP) if e.agent_id == "w-fin"]
    assert types == [T.AGENT_STARTED, T.PROGRESS, T.PROGRESS]


_STOP = "[STOP_WORK]\nagent_id: a9\nstop_reason: blocker\nblocker_type: missing_info\ndetails: key\n[/STOP_WORK]\n"
_REPORT = "## Tester Result\n\n### Status\nSUCCESS\n\n### Summary\nAll good.\n\n"


async def test_the_format_given_is_the_one_read(redis_url: str, tmp_path: Path) -> None:
    # a log whose first line reads as a transcript's entry: only --format text reads the rest as text
    out, log = tmp_path / "agent.log", tmp_path / "adapter.log"
    out.write_text('{"type": "user", "message": "starting"}\n' + _STOP)
    watcher = start(watch_args(out, "a9", "--format", "text"), redis_url, log)
    try:
        async with open_bus(redis_url) as bus:
            await wait_until(lambda: bus.has(GROUP, T.STOP_WORK), 20, "the STOP_WORK")
    finally:
        watcher.terminate()
        assert await exited(watcher, 30) == 0, log.read_text()


async def test_a_block_open_after_the_result_is_waited_for(redis_url: str, tmp_path: Path) -> None:
    """A result report, then a COMPLETION_REPORT being written: quiet for longer than the wait after a
    result, the adapter waits for the block's end all the same."""
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    out.write_text(_REPORT + "[COMPLETION_REPORT]\nagent_id: a9\n")
    async with open_bus(redis_url) as bus:
        watcher = start(watch_args(out, "a9", "--until-complete"), redis_url, log)
        await wait_until(lambda: bus.has(GROUP, T.RESULT), 20, "the result")
        with pytest.raises(TimeoutError):  # the wait after a result is 2 s
            await asyncio.wait_for(exited(watcher, 30), timeout=4)
        with out.open("a") as more:
            more.write("status: success\nsummary: done\n[/COMPLETION_REPORT]\n")
        assert await exited(watcher, 30) == 0, log.read_text()
        assert await bus.count(GROUP, T.COMPLETION_REPORT) == 1


@pytest.mark.parametrize("last", ["progress", "completion"])
async def test_what_was_written_to_a_rotated_file_before_the_new_one_came_is_read(
    redis_url: str, tmp_path: Path, last: str
) -> None:
    """Renamed and replaced by a new file (a log rotated with create) right after the adapter read to
    its end: what the agent wrote to the old file meanwhile is published before the new file is read;
    a COMPLETION_REPORT there ends ``--until-complete``."""
    out = tmp_path / "agent.out"
    progress = "[PROGRESS]\nagent_id: a9\npercent: {}\n[/PROGRESS]\n"
    written = {
        "progress": progress.format(20),
        "completion": "[COMPLETION_REPORT]\nagent_id: a9\nstatus: success\nsummary: done\n[/COMPLETION_REPORT]\n",
    }[last]
    out.write_text(progress.format(10))
    bus = await connect_bus(Settings.from_url(redis_url), "a9", GROUP)
    stop = asyncio.Event()
    watch = FileWatch(bus, WatchOptions(path=out, poll_s=0.01, until_complete=last == "completion"), stop)
    flush, rotate = bus.flush, asyncio.Event()

    async def flushed() -> None:  # at the end of the file, before the adapter looks for a new one
        await flush()
        if rotate.is_set():
            rotate.clear()
            with out.open("a") as old:
                old.write(written)
            out.rename(tmp_path / "agent.out.1")
            out.write_text(progress.format(30))

    bus.flush = flushed  # type: ignore[method-assign]
    following = asyncio.create_task(watch.run())
    try:
        async with open_bus(redis_url) as reader:
            await wait_until(lambda: reader.has(GROUP, T.PROGRESS), 20, "the first progress")
            rotate.set()
            if last == "completion":
                assert await asyncio.wait_for(following, 20) is True  # completed, the new file not followed
                assert await reader.count(GROUP, T.PROGRESS) == 1
                assert await reader.count(GROUP, T.COMPLETION_REPORT, T.AGENT_EXITED) == 2
                return
            await wait_until(lambda: reader.has(GROUP, T.PROGRESS, 3), 20, "the other two")
            percents = [e.payload.percent for e in await reader.of_type(GROUP, T.PROGRESS)]  # type: ignore[union-attr]
            assert percents == [10, 20, 30]
    finally:
        stop.set()
        await following
        await bus.client.aclose()


_ONE_PROGRESS = "[PROGRESS]\nagent_id: {}\npercent: {}\n[/PROGRESS]\n"


async def _percents_across_a_kill(
    path: Path, agent: str, redis_url: str, log: Path, meanwhile: Callable[[], None]
) -> list[float]:
    """Watch ``path`` until its first progress, kill the adapter with -9, run ``meanwhile`` (the agent
    writes on, its log rotates), watch again until three progress signals are on the bus: their percents."""
    args = watch_args(path, agent, "--poll", "0.01")
    first = start(args, redis_url, log)
    async with open_bus(redis_url) as bus:
        await wait_until(lambda: bus.has(GROUP, T.PROGRESS), 30, "the first progress")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        meanwhile()
        second = start(args, redis_url, log)
        try:
            await wait_until(lambda: bus.has(GROUP, T.PROGRESS, 3), 30, "the other two")
            second.send_signal(signal.SIGTERM)
            assert await exited(second, 30) == 0, f"the second adapter failed (its log: {log})"
        finally:
            second.kill()
        return [e.payload.percent for e in await bus.of_type(GROUP, T.PROGRESS)]  # type: ignore[union-attr]


async def test_a_file_rotated_while_its_adapter_was_killed_is_read_to_its_end_first(
    redis_url: str, tmp_path: Path
) -> None:
    """Killed with -9, then the agent writes on and its log is rotated (renamed, a new file created):
    the restarted adapter finds the renamed file by its inode and publishes what was written to it
    before the new file's output."""
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    out.write_text(_ONE_PROGRESS.format("a10", 10))

    def rotate() -> None:
        with out.open("a") as old:
            old.write(_ONE_PROGRESS.format("a10", 20))
        out.rename(tmp_path / "agent.out.1")
        out.write_text(_ONE_PROGRESS.format("a10", 30))

    assert await _percents_across_a_kill(out, "a10", redis_url, log, rotate) == [10, 20, 30]
    assert "renamed while the adapter was away" in log.read_text()


@pytest.mark.parametrize("new_in", ["logs", "elsewhere"])
async def test_a_link_pointed_elsewhere_while_its_adapter_was_killed_is_read_to_its_end_first(
    redis_url: str, tmp_path: Path, new_in: str
) -> None:
    """The path is a symbolic link that a rotation pointed at a new file, in the old one's directory or
    in another: the restarted adapter finds the file it read (in the directory the checkpoint names) and
    publishes the rest of it first. It looked in the link's own directory only, and lost that rest."""
    (tmp_path / "logs").mkdir()
    (tmp_path / new_in).mkdir(exist_ok=True)
    old, new, link = tmp_path / "logs" / "run1.log", tmp_path / new_in / "run2.log", tmp_path / "current.log"
    old.write_text(_ONE_PROGRESS.format("a15", 10))
    link.symlink_to(old)

    def repoint() -> None:
        with old.open("a") as written:
            written.write(_ONE_PROGRESS.format("a15", 20))
        new.write_text(_ONE_PROGRESS.format("a15", 30))
        link.unlink()
        link.symlink_to(new)

    percents = await _percents_across_a_kill(link, "a15", redis_url, tmp_path / "adapter.log", repoint)
    assert percents == [10, 20, 30]


async def test_a_file_replaced_while_its_adapter_was_away_is_said_to_be_replaced(
    redis_url: str, tmp_path: Path
) -> None:
    out, new, log = tmp_path / "agent.out", tmp_path / "agent.new", tmp_path / "adapter.log"
    await run_ok(fake(f"say:{'long first run ' * 40}", "progress:10", out=out, agent_id="a11"))
    args = watch_args(out, "a11", "--until-complete")
    first = start(args, redis_url, log)
    async with open_bus(redis_url) as bus:
        await wait_until(lambda: bus.has(GROUP, T.PROGRESS), 20, "the first run's signal")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        await run_ok(fake("complete", out=new, agent_id="a11"))
        os.replace(new, out)  # shorter than what was read: not a truncation all the same
        second = start(args, redis_url, log)
        assert await exited(second, 30) == 0, log.read_text()
    said = log.read_text()
    assert "was replaced by another file while the adapter was away" in said and "truncated" not in said


@pytest.mark.parametrize("killed", [False, True])
async def test_a_closing_tag_seen_at_a_pause_ends_its_block_after_a_restart_too(
    redis_url: str, tmp_path: Path, killed: bool
) -> None:
    """The agent paused after a closing tag, then wrote on that line past 4096 bytes, then a block whose
    tag line has text after it. The pause ended the first block for an adapter that ran throughout, and
    must for one killed meanwhile: read again from the start, the long line was no tag line, so the
    block stayed open and took the next one in."""
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    stop = "[STOP_WORK]\nagent_id: a16\nstop_reason: blocker\nblocker_type: missing_info\ndetails: key\n"
    out.write_text(stop + "[/STOP_WORK]")
    args = watch_args(out, "a16", "--poll", "0.01")
    watcher = start(args, redis_url, log)
    async with open_bus(redis_url) as bus:
        await wait_until(lambda: bus.has(GROUP, T.STOP_WORK), 30, "the STOP_WORK")
        if killed:
            watcher.send_signal(signal.SIGKILL)
            watcher.wait(timeout=10)
        tentative = "[PROGRESS] - halfway\nagent_id: a16\npercent: 50\n[/PROGRESS]\n"
        with out.open("a") as more:
            more.write(" " + "waiting " * 600 + "\n" + tentative + _ONE_PROGRESS.format("a16", 60))
        if killed:
            watcher = start(args, redis_url, log)

        async def percents() -> list[float]:
            return [e.payload.percent for e in await bus.of_type(GROUP, T.PROGRESS)]  # type: ignore[union-attr]

        async def last_progress() -> bool:
            return 60 in await percents()

        try:
            await wait_until(last_progress, 30, "the last progress")
            watcher.send_signal(signal.SIGTERM)
            assert await exited(watcher, 30) == 0, log.read_text()
        finally:
            watcher.kill()
        assert await percents() == [50, 60]
        assert await bus.count(GROUP, T.STOP_WORK) == 1


async def test_a_pause_is_kept_only_while_its_line_may_grow_longer_than_a_tag_line(redis_url: str) -> None:
    """The checkpoint keeps where pauses ended lines at closing tags; a line that ended within 4096 bytes
    reads the same without its pause, which is forgotten then, so the list does not grow with every
    signal an agent ends at a pause."""
    stop = "[STOP_WORK]\nagent_id: a17\nstop_reason: blocker\nblocker_type: missing_info\ndetails: key\n"
    async with open_bus(redis_url) as bus:
        stream = OutputStream(AgentBus(bus.client, bus.keys, "a17", GROUP), "file:/tmp/a17.out")
        for rest in (" done\n", " " + "waiting " * 600 + "\n", " still open"):
            stream.feed((stop + "[/STOP_WORK]").encode())
            assert [e.type for e in stream.settle()] == [T.STOP_WORK]
            stream.feed(rest.encode())
        short, long, open_ = (i * len(stop + "[/STOP_WORK]") for i in (1, 2, 3))
        long += len(" done\n")
        open_ += len(" done\n") + 4801 + len("\n")
        assert stream.pauses == [long, open_]  # the one in a short line gone
        assert short not in stream.pauses


class _Asking(FileWatch):
    """A watch that counts the times it asks whether the agent lives (once per heartbeat interval)."""

    asked = 0

    def _alive_now(self) -> bool:
        self.asked += 1
        return super()._alive_now()


@contextlib.asynccontextmanager
async def _following(url: str, agent: str, options: WatchOptions) -> AsyncIterator[_Asking]:
    """An adapter watching in this process, stopped at the end of the block."""
    bus = await connect_bus(Settings.from_url(url), agent, GROUP)
    stop = asyncio.Event()
    watch = _Asking(bus, options, stop)
    following = asyncio.create_task(watch.run())
    try:
        yield watch
    finally:
        stop.set()
        await following
        await bus.client.aclose()


async def test_without_a_pid_a_restarted_adapter_beats_only_for_output_written_while_it_watches(
    redis_url: str, tmp_path: Path
) -> None:
    """Without ``--pid`` only output says the agent lives. A restarted adapter reads the file again
    (plain text from its start), and what was written while it was away: none of that says the agent
    lives now, and a beat for it brought back an agent the coordinator had declared lost."""
    out = tmp_path / "agent.out"
    out.write_text(_ONE_PROGRESS.format("a17", 10))
    options = WatchOptions(path=out, poll_s=0.01, heartbeat_s=0.02)
    async with open_bus(redis_url) as reader:
        async with _following(redis_url, "a17", options):
            await wait_until(lambda: reader.has(GROUP, T.PROGRESS), 20, "the first progress")
        with out.open("a") as more:
            more.write("Still thinking...\n")  # written while the adapter was away
        beats = await reader.count(GROUP, T.HEARTBEAT)
        async with _following(redis_url, "a17", options) as watch:

            async def asked_thrice() -> bool:
                return watch.asked >= 3

            await wait_until(asked_thrice, 20, "the adapter to ask three times whether the agent lives")
            assert await reader.count(GROUP, T.HEARTBEAT) == beats
            with out.open("a") as more:
                more.write(_ONE_PROGRESS.format("a17", 20))
            await wait_until(lambda: reader.has(GROUP, T.HEARTBEAT, beats + 1), 20, "a beat for new output")
        percents = [e.payload.percent for e in await reader.of_type(GROUP, T.PROGRESS)]  # type: ignore[union-attr]
        assert percents == [10, 20]


async def test_a_file_truncated_and_rewritten_while_a_chunk_is_parsed_is_read_anew_whole(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkpoint's fingerprints are of the bytes parsed, not of the file as it is after the parse:
    taken from the rewritten file, they vouched for its start as what was read, and its first signals
    were lost (the rest published as the old output's)."""
    out = tmp_path / "agent.out"
    block = "prose {0}\n[PROGRESS]\nagent_id: a12\npercent: {0}\nmessage: {1} {0}\n[/PROGRESS]\n"
    old = "".join(block.format(i, "old") for i in range(3)).encode()
    new = "".join(block.format(i, "new") for i in range(10)).encode()
    out.write_bytes(old)
    feed = OutputStream.feed

    def rewritten_while_parsed(stream: OutputStream, chunk: bytes) -> Any:
        items = feed(stream, chunk)
        if stream.fed == len(old) and not stream.source.endswith("#1"):  # copytruncate, a longer output
            with out.open("r+b") as file:
                file.truncate(0)
                file.write(new)
        return items

    monkeypatch.setattr(OutputStream, "feed", rewritten_while_parsed)
    bus = await connect_bus(Settings.from_url(redis_url), "a12", GROUP)
    stop = asyncio.Event()
    following = asyncio.create_task(FileWatch(bus, WatchOptions(path=out, poll_s=0.01), stop).run())
    try:
        async with open_bus(redis_url) as reader:
            await wait_until(lambda: reader.has(GROUP, T.PROGRESS, 13), 20, "both outputs' progress")
            progress = await reader.of_type(GROUP, T.PROGRESS)
            published = [(e.source.rsplit("#", 1)[-1], getattr(e.payload, "message", None)) for e in progress]
    finally:
        stop.set()
        await following
        await bus.client.aclose()
    source = f"file:{canonical(out)}"
    assert published == [(source, f"old {i}") for i in range(3)] + [("1", f"new {i}") for i in range(10)]


async def test_a_quiet_spell_the_adapter_was_held_through_does_not_end_it_unread(
    redis_url: str, tmp_path: Path
) -> None:
    """The adapter read a result report to the end of the file and was then held (paused here; a flush
    waiting out a Redis outage holds it the same) for longer than a result report's quiet spell, while the
    agent wrote the rest of its report, a progress and its completion report: all of it is published."""
    out, log = tmp_path / "agent.out", tmp_path / "adapter.log"
    report = "## Tester Result\n\n### Status\nSUCCESS\n\n### Summary\nAll good.\n"
    out.write_text(report)
    adapter = start(watch_args(out, "q1", "--until-complete"), redis_url, log)
    async with open_bus(redis_url) as bus:

        async def read_to_the_end() -> bool:
            keys = [key async for key in bus.client.scan_iter(match=b"*offset:q1:*")]
            raw = await bus.client.get(keys[0]) if keys else None
            return raw is not None and orjson.loads(raw)["read"] == len(report)

        await wait_until(read_to_the_end, 30, "the adapter to read the report to the end of the file")
        adapter.send_signal(signal.SIGSTOP)
        with out.open("a") as file:
            file.write(
                "\n### Confidence\n90\n\n[PROGRESS]\nagent_id: q1\npercent: 99\nmessage: almost\n[/PROGRESS]\n"
                "[COMPLETION_REPORT]\nagent_id: q1\nstatus: success\nsummary: done\n[/COMPLETION_REPORT]\n"
            )
        await asyncio.sleep(AFTER_RESULT_S + 1)  # the pause itself is what is tested: longer than the spell
        adapter.send_signal(signal.SIGCONT)
        assert await exited(adapter, 30) == 0, log.read_text()
        envelopes = await bus.envelopes(GROUP)
    said = [e for e in envelopes if e.type in (T.RESULT, T.PROGRESS, T.COMPLETION_REPORT)]
    assert [e.type for e in said] == [T.RESULT, T.PROGRESS, T.COMPLETION_REPORT]
    result = said[0].payload
    assert isinstance(result, ResultReport) and result.confidence is not None
    assert result.confidence.score == 90  # the report read whole
