"""``adapter watch`` of Codex CLI's ``codex exec --json`` output, on a real Redis: the format is told from
its first line, only the agent's messages are published, ``{session_id}`` is the thread id, a
restart after SIGKILL publishes the rest once, under the ids one reading of the whole output gives, and
a failed turn is a STOP_WORK error."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import orjson
from adapter_kit import exited, open_bus, start, wait_until

from agents.parser import ErrorItem
from agents.transcript import Format, TranscriptParser
from agents.watched_file import canonical, source_of
from bus.directives import AnswerItem, ClarificationResponse
from bus.envelope import EnvelopeType, Kind, deterministic_id, new_envelope
from bus.publisher import Publisher
from bus.signals import StopReason, StopWork

T = EnvelopeType
GROUP = "g-codex"
OUTPUT = (Path(__file__).parent / "data" / "codex_exec.jsonl").read_bytes()


def watch_args(path: Path, *extra: str) -> list[str]:
    return ["adapter", "watch", str(path), "--agent-id", "cx-1", "--group", GROUP, *extra]


async def test_codex_exec_output_is_read_resumed_by_its_thread_id_and_restarted(
    redis_url: str, tmp_path: Path
) -> None:
    out, log, argv_file = tmp_path / "codex.jsonl", tmp_path / "adapter.log", tmp_path / "argv.json"
    writer = f"{sys.executable} -c 'import json,sys; open(sys.argv[1],\"w\").write(json.dumps(sys.argv[2:]))'"
    template = f"command:{writer} {argv_file} {{session_id}} {{type}}"
    first = start(watch_args(out, "--deliver", template, "--retry-ms", "100"), redis_url, log)
    turn = OUTPUT.index(b'{"type": "thread.started"', 1)  # the second turn: `codex exec resume`
    async with open_bus(redis_url) as bus:
        for at in range(0, turn, 333):  # written in pieces cut inside JSON lines, as a live agent would
            with out.open("ab") as stream:
                stream.write(OUTPUT[at : min(at + 333, turn)])

        await wait_until(lambda: bus.has(GROUP, T.CLARIFICATION_NEEDED), 30, "the question")
        response = ClarificationResponse(answers=[AnswerItem(question_id="Q1", answer="both")])
        directive = new_envelope(response, agent_id="cx-1", group_id=GROUP, source="test")
        await Publisher(bus.client, bus.keys).send_directive(directive)

        async def delivered() -> bool:  # said once the command ran (its file is written before)
            return "delivered CLARIFICATION_RESPONSE" in log.read_text()

        await wait_until(delivered, 30, "the resume command")
        thread = orjson.loads(OUTPUT.splitlines()[0])["thread_id"]
        assert orjson.loads(argv_file.read_bytes()) == [thread, "CLARIFICATION_RESPONSE"]
        # killed while the resumed turn is half written: its adapter's successor takes over
        with out.open("ab") as stream:
            stream.write(OUTPUT[turn : len(OUTPUT) - 500])
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        with out.open("ab") as stream:
            stream.write(OUTPUT[len(OUTPUT) - 500 :])
        second = start(watch_args(out, "--until-complete"), redis_url, log)
        assert await exited(second, 60) == 0, log.read_text()
        said = [e for e in await bus.envelopes(GROUP) if e.kind in (Kind.SIGNAL, Kind.RESULT)]
    # reasoning, a command's output and a tool call quote signals: none is the agent's
    assert [e.type for e in said] == [T.CLARIFICATION_NEEDED, T.PROGRESS, T.RESULT, T.COMPLETION_REPORT]
    parser = TranscriptParser(fmt=Format.CODEX_JSONL)
    items = [i for i in parser.feed(OUTPUT) + parser.close() if not isinstance(i, ErrorItem)]
    source = source_of(canonical(out), 0)
    assert [e.id for e in said] == [deterministic_id("cx-1", source, i.offset) for i in items]


async def test_a_watched_failed_turn_blocks_the_agent_instead_of_leaving_it_to_time_out(
    redis_url: str, tmp_path: Path
) -> None:
    out, log = tmp_path / "codex.jsonl", tmp_path / "adapter.log"
    out.write_bytes((Path(__file__).parent / "data" / "codex_exec_failed.jsonl").read_bytes())
    watch = start(watch_args(out), redis_url, log)
    try:
        async with open_bus(redis_url) as bus:
            await wait_until(lambda: bus.has(GROUP, T.STOP_WORK), 30, "the failed turn")
            [stop] = await bus.of_type(GROUP, T.STOP_WORK)
        watch.send_signal(signal.SIGTERM)
        assert await exited(watch, 30) == 0, log.read_text()
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert isinstance(stop.payload, StopWork)
    assert stop.payload.stop_reason is StopReason.ERROR
    assert stop.payload.details.startswith(
        "The agent's turn failed: Codex CLI reported turn.failed: You've hit your usage limit."
    )
    items = TranscriptParser(fmt=Format.CODEX_JSONL).feed(out.read_bytes())
    assert stop.id == deterministic_id("cx-1", source_of(canonical(out), 0), items[-1].offset)
