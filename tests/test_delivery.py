"""Directives back to the agent: print, file and command delivery, acknowledgement, the full loop."""

from __future__ import annotations

import asyncio
import io
import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.exceptions
from adapter_kit import CLI, Bus, exited, fake, open_bus, run, run_ok, spawn, start, stream_fields, wait_until
from test_launch_acks import CuttingProxy

from agents.adapter import MARK_TTL_S
from agents.delivery import (
    CommandDelivery,
    DeliveryFailed,
    DeliveryKind,
    DeliverySpec,
    Directive,
    FileDelivery,
    PrintDelivery,
    as_directive,
    end_marker,
    fill,
    split_template,
)
from agents.inbox_listener import InboxListener
from bus.directives import (
    AnswerItem,
    BlockerResolved,
    ClarificationResponse,
    LaunchReason,
    LaunchRequest,
)
from bus.envelope import Envelope, EnvelopeType, Kind, new_envelope
from bus.events import AgentExited, AgentState
from bus.keys import StreamKind, dead_stream_for
from bus.publisher import Publisher
from bus.signals import StopReason, StopWork

T = EnvelopeType
GROUP = "g-deliver"
HOSTILE = (
    '## CLARIFICATION RESPONSE\nA1: both\'; rm -rf / ; echo "$(whoami)" `id` {agent_id} && touch PWNED > OUT'
)
WRITER = Path(__file__).parent / "fake_agents" / "argv_writer.py"


def directive(answer: str = "both", agent: str = "d1") -> Envelope:
    payload = ClarificationResponse(answers=[AnswerItem(question_id="Q1", answer=answer)], next_step="Go on")
    return new_envelope(payload, agent_id=agent, group_id=GROUP, source="test")


# -- templates ---------------------------------------------------------------------------------------


def test_placeholders_are_replaced_inside_arguments_after_splitting() -> None:
    argv = split_template("resume --session {session_id} -p {prompt} '--tag={type} {agent_id}'")
    assert argv == ["resume", "--session", "{session_id}", "-p", "{prompt}", "--tag={type} {agent_id}"]
    filled = fill(argv, {"session_id": "s1", "prompt": HOSTILE, "type": "X", "agent_id": "a1"})
    assert filled == ["resume", "--session", "s1", "-p", HOSTILE, "--tag=X a1"]
    assert "{agent_id}" in filled[4]  # a value is never scanned for placeholders again


def test_bad_templates_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown placeholder \\{sesion_id\\}"):
        split_template("claude --resume {sesion_id}")
    with pytest.raises(ValueError, match="cannot split"):
        split_template("claude 'unbalanced")
    with pytest.raises(ValueError, match="empty"):
        split_template("   ")
    with pytest.raises(ValueError, match="unclosed placeholder \\{prompt in"):
        split_template("claude -p {prompt")
    with pytest.raises(ValueError, match="unclosed placeholder \\{agent_id,"):
        split_template("run '--tag {agent_id x' {type")
    for formatted in ("{agent_id!r}", "{prompt:>60}", "{agent_id.__class__}", "{agent_id[0]}"):
        with pytest.raises(ValueError, match="takes no attribute, index or format"):
            split_template(f"run {formatted}")
    assert split_template("""jq '{a: 1}' {"b":2}""")[1] == "{a: 1}"  # braces that are not placeholders
    assert split_template("jq '{agent_id: .x}' {other")[1:] == ["{agent_id: .x}", "{other"]


def test_missing_values_fail_the_delivery() -> None:
    delivery = CommandDelivery(
        split_template("claude --resume {session_id} -p {prompt}"), lambda: {"session_id": None}
    )
    with pytest.raises(DeliveryFailed, match="\\{session_id\\} has no value yet"):
        delivery.command(Directive(directive(), "hi"))


def test_delivery_specs() -> None:
    assert DeliverySpec.parse("print").kind is DeliveryKind.PRINT
    assert DeliverySpec.parse("file:/tmp/r.md").path == Path("/tmp/r.md")
    assert DeliverySpec.parse("command:codex exec resume {session_id} {prompt}").argv == (
        "codex",
        "exec",
        "resume",
        "{session_id}",
        "{prompt}",
    )
    for bad in ("mail", "file:", "command:", "print:x", "command:x {nope}"):
        with pytest.raises(ValueError):
            DeliverySpec.parse(bad)


def test_only_agent_directives_are_delivered() -> None:
    launch = LaunchRequest(request_id="r", new_agent_id="n", reason=LaunchReason.DELEGATION, task="t")
    assert as_directive(new_envelope(launch, agent_id="n", group_id=GROUP)) is None
    found = as_directive(directive())
    assert found is not None
    assert found.prompt.startswith("## CLARIFICATION RESPONSE")


# -- the methods -------------------------------------------------------------------------------------


async def test_print_delivery() -> None:
    out = io.BytesIO()
    found = as_directive(directive())
    assert found is not None
    await PrintDelivery(out).deliver(found)
    text = out.getvalue().decode()
    assert text.startswith("## CLARIFICATION RESPONSE\n")
    assert text.endswith(f"{end_marker(found)}\n\n")


class _ReaderGone(io.BytesIO):
    """A pipe whose reader went away after 100 bytes: a short count, then a broken pipe (as a buffered
    stdout behaves)."""

    def write(self, data: Any) -> int:
        if self.tell():
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(bytes(data)[:100])


async def test_print_delivery_of_a_prompt_its_reader_took_only_part_of_failed() -> None:
    found = as_directive(directive())
    assert found is not None
    with pytest.raises(DeliveryFailed, match=r"cannot print the prompt: .*Broken pipe"):
        await PrintDelivery(_ReaderGone()).deliver(found)


async def test_file_delivery_appends_once(tmp_path: Path) -> None:
    path = tmp_path / "responses.md"
    first = as_directive(directive("both"))
    second = as_directive(
        new_envelope(BlockerResolved(issue="deps", resolution="installed"), agent_id="d1", group_id=GROUP)
    )
    assert first is not None and second is not None
    delivery = FileDelivery(path)
    await delivery.deliver(first)
    await delivery.deliver(first)  # redelivered after a crash before the acknowledgement
    await delivery.deliver(second)
    text = path.read_text()
    assert text.count("## CLARIFICATION RESPONSE") == 1
    assert text.index("## CLARIFICATION RESPONSE") < text.index("## BLOCKER RESOLVED")
    assert text.count("<!-- end of directive") == 2
    with pytest.raises(DeliveryFailed, match="cannot append"):
        await FileDelivery(tmp_path / "missing" / "dir" / "r.md").deliver(first)


async def test_a_file_delivery_cut_short_by_a_kill_is_written_again_whole(tmp_path: Path) -> None:
    """A SIGKILL can stop a large write halfway: the retried delivery replaces the piece it left."""
    path = tmp_path / "responses.md"
    first, second = as_directive(directive("first")), as_directive(directive("x" * 100_000))
    assert first is not None and second is not None
    delivery = FileDelivery(path)
    await delivery.deliver(first)
    whole = path.read_bytes()
    await delivery.deliver(second)
    both = path.read_bytes()
    for cut in (1, 5_000, len(both) - len(whole) - len(end_marker(second)) - 3):
        path.write_bytes(both[: len(whole) + cut])  # what the killed adapter left
        await delivery.deliver(second)
        assert path.read_bytes() == both
    path.write_bytes(whole + b"the agent's own note\n")  # not a piece of the prompt: kept
    await delivery.deliver(second)
    assert path.read_bytes() == whole + b"the agent's own note\n" + both[len(whole) :]


async def test_command_delivery_passes_a_hostile_prompt_as_one_argument(tmp_path: Path) -> None:
    record = tmp_path / "argv.json"
    argv = split_template(f"{sys.executable} {WRITER} {record} {{agent_id}} {{prompt}} --type={{type}}")
    delivery = CommandDelivery(argv, lambda: {"agent_id": "d1", "group_id": GROUP, "session_id": None})
    found = as_directive(directive())
    assert found is not None
    hostile = Directive(found.envelope, HOSTILE)
    await delivery.deliver(hostile)
    assert orjson.loads(record.read_bytes()) == ["d1", HOSTILE, "--type=CLARIFICATION_RESPONSE"]
    assert not (Path.cwd() / "PWNED").exists()
    assert not (Path.cwd() / "OUT").exists()


async def test_a_failing_command_is_a_failed_delivery(tmp_path: Path) -> None:
    found = as_directive(directive())
    assert found is not None
    failing = CommandDelivery([sys.executable, "-c", "import sys; print('no session'); sys.exit(3)"], dict)
    with pytest.raises(DeliveryFailed, match="exited with code 3: no session"):
        await failing.deliver(found)
    missing = CommandDelivery([str(tmp_path / "nope")], dict)
    with pytest.raises(DeliveryFailed, match="cannot start"):
        await missing.deliver(found)


# -- through a real adapter --------------------------------------------------------------------------


def idle_adapter(tmp_path: Path, agent: str, *deliver: str) -> list[str]:
    """An adapter whose agent has not written its output file yet: only its inbox is active."""
    return [
        "adapter",
        "watch",
        str(tmp_path / f"{agent}.out"),
        "--agent-id",
        agent,
        "--group",
        GROUP,
        *deliver,
    ]


async def pending(bus: Bus, agent: str) -> int:
    """Directives of the agent's inbox delivered to its adapter and not acknowledged (-1: no group yet)."""
    try:
        summary = await bus.client.xpending(bus.inbox(GROUP, agent), "adapter")
    except redis.exceptions.ResponseError:
        return -1
    return int(summary["pending"])


async def test_print_delivery_through_the_adapter(redis_url: str, tmp_path: Path) -> None:
    out = tmp_path / "stdout"
    async with open_bus(redis_url) as bus:
        await Publisher(bus.client, bus.keys).send_directive(directive(agent="d2"))
        with out.open("wb") as stdout:
            adapter = start(
                idle_adapter(tmp_path, "d2", "--deliver", "print"), redis_url, tmp_path / "log", stdout=stdout
            )

            async def printed() -> bool:
                return "<!-- end of directive" in out.read_text()

            await wait_until(printed, 20, "the printed prompt")
            adapter.send_signal(signal.SIGTERM)
            assert await exited(adapter, 20) == 0
        assert out.read_text().startswith("## CLARIFICATION RESPONSE\n\nYour questions have been answered:")
        assert await pending(bus, "d2") == 0


async def test_a_delivery_failing_every_time_is_dead_lettered(bus_url: str, tmp_path: Path) -> None:
    command = f"command:{sys.executable} -c 'import sys; sys.exit(\"resume refused\")'"
    adapter = start(
        idle_adapter(tmp_path, "d3", "--deliver", command, "--retry-ms", "100", "--max-attempts", "2"),
        bus_url,
        tmp_path / "log",
    )
    async with open_bus(bus_url) as bus:
        sent = directive(agent="d3")
        await Publisher(bus.client, bus.keys).send_directive(sent)

        async def dead() -> bool:
            return await bus.client.xlen(bus.stream(GROUP, StreamKind.DEAD)) == 1

        await wait_until(dead, 30, "the directive to be dead-lettered")
        [fields] = await stream_fields(bus.client, bus.stream(GROUP, StreamKind.DEAD))
        assert b"resume refused (attempt 2 of 2)" in fields[b"reason"]
        assert orjson.loads(fields[b"data"])["id"] == sent.id
        assert await pending(bus, "d3") == 0
        # the parent is told: the agent did not get its answer
        [stop] = await bus.of_type(GROUP, T.STOP_WORK)
        assert isinstance(stop.payload, StopWork) and stop.payload.stop_reason is StopReason.ERROR
        assert f"CLARIFICATION_RESPONSE (directive {sent.id}) was given up on" in stop.payload.details
        assert "resume refused" in stop.payload.details and stop.agent_id == "d3"
    adapter.send_signal(signal.SIGTERM)
    assert await exited(adapter, 20) == 0
    log = (tmp_path / "log").read_text()
    assert "(attempt 1 of 2): " in log and "given up" not in log.split("attempt 2 of 2")[0]
    assert "resume refused\n" in log.split("attempt 2 of 2")[1]
    assert "given up: it goes to the dead letters" in log.split("attempt 2 of 2")[1]


async def test_a_last_attempt_cut_short_by_kill_9_is_given_up_after_the_restart(
    redis_url: str, tmp_path: Path
) -> None:
    async with open_bus(redis_url) as bus:
        sent = await killed_mid_delivery(bus, redis_url, tmp_path, "d8", "--max-attempts", "1")
        log, blocking = tmp_path / "log", blocking_delivery(tmp_path)
        second = start(
            idle_adapter(tmp_path, "d8", "--deliver", blocking, "--max-attempts", "1", "--retry-ms", "100"),
            redis_url,
            log,
        )

        async def dead() -> bool:
            return await bus.client.xlen(bus.stream(GROUP, StreamKind.DEAD)) == 1

        await wait_until(dead, 30, "the directive to be given up on")
        [stop] = await bus.of_type(GROUP, T.STOP_WORK)
        assert isinstance(stop.payload, StopWork)
        assert f"(directive {sent.id}) was given up on" in stop.payload.details
        assert "its attempt 1 of 1 was cut short" in stop.payload.details
        assert "whether it reached the agent is not known" in stop.payload.details
        assert await pending(bus, "d8") == 0
        second.send_signal(signal.SIGTERM)
        assert await exited(second, 20) == 0


async def read_often(bus: Bus, agent: str, times: int) -> str:
    """The agent's next directive, read by ``listen`` ``times`` times (listeners stopped before they
    printed it): its entry id."""
    inbox = bus.inbox(GROUP, agent)
    await bus.client.xgroup_create(inbox, "adapter", "0", mkstream=True)
    read: Any = await bus.client.xreadgroup("adapter", "listen", {inbox: ">"}, count=1)
    entry: bytes = read[0][1][0][0]
    await bus.client.xclaim(inbox, "adapter", "listen", 0, [entry], justid=True, retrycount=times)
    return entry.decode()


async def test_a_directive_of_another_group_read_many_times_is_still_left_for_that_group(
    redis_url: str, tmp_path: Path
) -> None:
    """An adapter reads another group's directive each time its entry is idle and hands it on: it was
    dead-lettered, unread, once those reads (and those of its own group's listeners) passed the limit."""
    async with open_bus(redis_url) as bus:
        shard = bus.keys.shard_of(GROUP)
        other = next(
            g for g in (f"g-{i}" for i in range(1000)) if bus.keys.shard_of(g) == shard and g != GROUP
        )
        await Publisher(bus.client, bus.keys).send_directive(
            directive(agent="d11").model_copy(update={"group_id": other})
        )
        entry = await read_often(bus, "d11", 100)  # over --max-attempts 1 + 50 reads
        log = tmp_path / "log"
        args = idle_adapter(tmp_path, "d11", "--deliver", "print", "--max-attempts", "1", "--retry-ms", "100")
        adapter = start(args, redis_url, log)
        said = f"the directive {entry} is for group {other!r}"

        async def looked_at() -> bool:
            return said in log.read_text() or await bus.client.xlen(bus.stream(GROUP, StreamKind.DEAD)) > 0

        await wait_until(looked_at, 20, "the adapter to read the other group's directive")
        inbox = bus.inbox(GROUP, "d11")
        handed: list[int] = []  # the entry's idle time, which each hand-on restarts

        async def handed_on_thrice() -> bool:
            [held] = await bus.client.xpending_range(inbox, "adapter", "-", "+", 1)
            handed.append(int(held["time_since_delivered"]))
            return sum(1 for a, b in itertools.pairwise(handed) if b < a) >= 3

        await wait_until(handed_on_thrice, 20, "the adapter to hand it on three times")
        adapter.send_signal(signal.SIGTERM)
        assert await exited(adapter, 20) == 0
        assert await bus.client.xlen(bus.stream(GROUP, StreamKind.DEAD)) == 0, log.read_text()
        held: Any = await bus.client.xpending_range(inbox, "adapter", "-", "+", 10)
        assert [(h["message_id"].decode(), h["consumer"]) for h in held] == [(entry, b"listen")]
        # each read undone as it was handed on: its own group's adapter does not take them for its own
        assert held[0]["times_delivered"] in (100, 101)  # 101: stopped between a read and its hand-on


async def test_a_directive_read_too_often_is_given_up_and_the_parent_told(
    redis_url: str, tmp_path: Path
) -> None:
    async with open_bus(redis_url) as bus:
        sent = directive(agent="d12")
        await Publisher(bus.client, bus.keys).send_directive(sent)
        await read_often(bus, "d12", 100)
        log, args = tmp_path / "log", idle_adapter(tmp_path, "d12", "--deliver", "print", "--retry-ms", "100")
        adapter = start(args, redis_url, log)

        async def told() -> bool:
            return await bus.count(GROUP, T.STOP_WORK) == 1

        await wait_until(told, 20, "the parent to be told")
        [stop] = await bus.of_type(GROUP, T.STOP_WORK)
        assert isinstance(stop.payload, StopWork)
        assert f"(directive {sent.id}) was given up on" in stop.payload.details
        assert "it was read 101 times and never delivered" in stop.payload.details
        adapter.send_signal(signal.SIGTERM)
        assert await exited(adapter, 20) == 0
        assert await bus.client.xlen(bus.stream(GROUP, StreamKind.DEAD)) == 1
        assert await pending(bus, "d12") == 0


def blocking_delivery(tmp_path: Path) -> str:
    """A resume command that waits until the file ``go`` exists."""
    go = tmp_path / "go"
    return f"command:{sys.executable} {WRITER} {tmp_path / 'never.json'} --wait-for {go} {{prompt}}"


async def killed_mid_delivery(bus: Bus, url: str, tmp_path: Path, agent: str, *options: str) -> Envelope:
    """A directive sent to an adapter whose delivery blocks, the adapter killed with -9 in the middle of
    it, and the delivery command it left running ended too: the directive sent."""
    args = idle_adapter(tmp_path, agent, "--deliver", blocking_delivery(tmp_path), *options)
    adapter = start(args, url, tmp_path / "log")
    sent = directive(agent=agent)
    await Publisher(bus.client, bus.keys).send_directive(sent)

    async def in_hand() -> bool:  # read, and its attempt counted: the adapter delivers it now
        if await pending(bus, agent) != 1:
            return False
        held: Any = await bus.client.xpending_range(bus.inbox(GROUP, agent), "adapter", "-", "+", 1)
        entry = held[0]["message_id"].decode()
        counted = bus.keys.state(bus.keys.shard_of(GROUP), f"offset:{agent}:attempts:{entry}")
        return bool(await bus.client.exists(counted))

    await wait_until(in_hand, 20, "the delivery to start")
    adapter.send_signal(signal.SIGKILL)
    adapter.wait(timeout=10)
    (tmp_path / "go").touch()
    return sent


async def test_a_killed_adapter_redelivers_on_restart(redis_url: str, tmp_path: Path) -> None:
    async with open_bus(redis_url) as bus:
        await killed_mid_delivery(bus, redis_url, tmp_path, "d4")
        log = tmp_path / "log"
        assert await pending(bus, "d4") == 1  # not acknowledged: the delivery never finished
        responses = tmp_path / "responses.md"
        second = start(idle_adapter(tmp_path, "d4", "--deliver", f"file:{responses}"), redis_url, log)

        async def delivered() -> bool:
            return responses.exists() and await pending(bus, "d4") == 0

        await wait_until(delivered, 20, "the redelivery")
        assert responses.read_text().count("## CLARIFICATION RESPONSE") == 1
        second.send_signal(signal.SIGTERM)
        assert await exited(second, 20) == 0


async def test_reads_of_listeners_killed_before_they_printed_are_no_attempts_of_the_adapter(
    redis_url: str, tmp_path: Path
) -> None:
    """`listen` reads in the adapter's group: each read it left raised the stream's count, which the
    adapter took for its own attempts, so it gave up on a directive it never tried (or dead-lettered it
    unread, telling nobody)."""
    async with open_bus(redis_url) as bus:
        await Publisher(bus.client, bus.keys).send_directive(directive(agent="d9"))
        inbox = bus.inbox(GROUP, "d9")
        await bus.client.xgroup_create(inbox, "adapter", id="0")
        read: Any = await bus.client.xreadgroup("adapter", "listen", {inbox: ">"})
        [[_, [(entry, _)]]] = read
        for _ in range(3):  # three more listeners, each killed before it printed
            await bus.client.xclaim(inbox, "adapter", "listen", 0, [entry])
        responses, log = tmp_path / "responses.md", tmp_path / "log"
        options = ("--deliver", f"file:{responses}", "--max-attempts", "1", "--retry-ms", "100")
        adapter = start(idle_adapter(tmp_path, "d9", *options), redis_url, log)

        async def delivered() -> bool:
            return responses.exists() and await pending(bus, "d9") == 0

        await wait_until(delivered, 20, "the delivery")
        assert responses.read_text().count("## CLARIFICATION RESPONSE") == 1
        assert await bus.client.xlen(bus.stream(GROUP, StreamKind.DEAD)) == 0
        adapter.send_signal(signal.SIGTERM)
        assert await exited(adapter, 20) == 0


async def test_a_directive_of_another_group_is_left_for_that_group_not_delivered(
    redis_url: str, tmp_path: Path
) -> None:
    """One agent id in two groups of a shard has one inbox there (and anyone with the adapter's user may
    add an entry): a delivering adapter resumed its agent with the other group's directive."""
    async with open_bus(redis_url) as bus:
        shard = bus.keys.shard_of(GROUP)
        other = next(
            g for g in (f"g-{i}" for i in range(1000)) if bus.keys.shard_of(g) == shard and g != GROUP
        )
        publisher = Publisher(bus.client, bus.keys)
        theirs = directive(agent="d10").model_copy(update={"group_id": other})
        await publisher.send_directive(theirs)
        responses, log = tmp_path / "responses.md", tmp_path / "log"
        adapter = start(idle_adapter(tmp_path, "d10", "--deliver", f"file:{responses}"), redis_url, log)
        await publisher.send_directive(directive(agent="d10"))  # its own, behind the other

        async def delivered() -> bool:
            return responses.exists()

        await wait_until(delivered, 20, "its own directive")
        adapter.send_signal(signal.SIGTERM)
        assert await exited(adapter, 20) == 0
        assert responses.read_text().count("## CLARIFICATION RESPONSE") == 1
        held: Any = await bus.client.xpending_range(bus.inbox(GROUP, "d10"), "adapter", "-", "+", 10)
        assert [h["consumer"] for h in held] == [b"listen"]  # the other's, for its own group's readers
        listened = await asyncio.to_thread(
            subprocess.run,
            [
                CLI,
                "listen",
                "--agent-id",
                "d10",
                "--group",
                other,
                "--claim-idle-ms",
                "200",
                "--timeout",
                "10",
            ],
            capture_output=True,
            env={**os.environ, "SUBAGENT_BUS_REDIS_URL": redis_url},
            timeout=60,
            check=False,
        )
        assert listened.returncode == 0, listened.stderr  # its own group's listener has it
        assert listened.stdout.decode().startswith("## CLARIFICATION RESPONSE")
        said = f"is for group {other!r}, not {GROUP!r}: left for a listener or adapter of that group"
        assert log.read_text().count(said) == 1


async def test_a_directive_a_killed_adapter_held_is_taken_over_by_listen(
    redis_url: str, tmp_path: Path
) -> None:
    async with open_bus(redis_url) as bus:
        sent = await killed_mid_delivery(bus, redis_url, tmp_path, "d7")  # and nothing starts it again
        listener = InboxListener(bus.client, bus.inbox(GROUP, "d7"), abandoned_ms=500)
        received = await listener.next(15)
        assert received is not None and received.directive.envelope == sent
        await listener.ack(received)
        assert await pending(bus, "d7") == 0


async def test_an_adapter_holds_only_the_directive_it_delivers(redis_url: str, tmp_path: Path) -> None:
    """Directives read with it but not yet delivered would look abandoned to ``listen`` once the
    delivery outlasts ``ABANDONED_MS``, and be printed by ``listen`` and delivered by the adapter."""
    go = tmp_path / "go"
    blocking = f"command:{sys.executable} {WRITER} {tmp_path / 'argv.json'} --wait-for {go} {{prompt}}"
    async with open_bus(redis_url) as bus:
        for answer in ("first", "second"):
            await Publisher(bus.client, bus.keys).send_directive(directive(answer, agent="d8"))
        adapter = start(idle_adapter(tmp_path, "d8", "--deliver", blocking), redis_url, tmp_path / "log")
        try:

            async def reading() -> bool:
                return await pending(bus, "d8") > 0

            await wait_until(reading, 20, "the adapter to read its inbox")
            assert await pending(bus, "d8") == 1
            go.touch()

            async def delivered() -> bool:
                return await pending(bus, "d8") == 0 and await bus.client.xlen(bus.inbox(GROUP, "d8")) == 2

            await wait_until(delivered, 20, "both deliveries")
        finally:
            go.touch()
            adapter.terminate()
            adapter.wait(timeout=10)


async def test_the_adapter_runs_a_resume_command_without_a_shell(redis_url: str, tmp_path: Path) -> None:
    record = tmp_path / "argv.json"
    template = f"command:{sys.executable} {WRITER} {record} {{prompt}} {{type}}-{{agent_id}}"
    adapter = start(
        idle_adapter(tmp_path, "d6", "--deliver", template), redis_url, tmp_path / "log", cwd=tmp_path
    )
    async with open_bus(redis_url) as bus:
        sent = directive(HOSTILE, agent="d6")
        await Publisher(bus.client, bus.keys).send_directive(sent)

        async def ran() -> bool:
            return record.exists()

        await wait_until(ran, 20, "the resume command")
        found = as_directive(sent)
        assert found is not None
        assert orjson.loads(record.read_bytes()) == [found.prompt, "CLARIFICATION_RESPONSE-d6"]
        assert HOSTILE in found.prompt
        assert not (tmp_path / "PWNED").exists()
        assert not (tmp_path / "OUT").exists()
    adapter.send_signal(signal.SIGTERM)
    assert await exited(adapter, 20) == 0


async def test_other_entries_in_an_inbox_are_dead_lettered(redis_url: str, tmp_path: Path) -> None:
    responses = tmp_path / "responses.md"
    async with open_bus(redis_url) as bus:
        launch = LaunchRequest(request_id="r", new_agent_id="d5", reason=LaunchReason.RETRY, task="t")
        publisher = Publisher(bus.client, bus.keys)
        await publisher.send_directive(new_envelope(launch, agent_id="d5", group_id=GROUP))
        await publisher.send_directive(directive(agent="d5"))
        adapter = start(
            idle_adapter(tmp_path, "d5", "--deliver", f"file:{responses}"), redis_url, tmp_path / "log"
        )

        async def done() -> bool:
            return responses.exists() and await pending(bus, "d5") == 0

        await wait_until(done, 20, "the inbox to be handled")
        adapter.send_signal(signal.SIGTERM)
        assert await exited(adapter, 20) == 0
        assert responses.read_text().count("<!-- end of directive") == 1
        assert "LAUNCH" in (tmp_path / "log").read_text()
        dead: Any = await bus.client.xrange(dead_stream_for(bus.inbox(GROUP, "d5")), "-", "+")
        assert [f[b"reason"].decode().endswith("is not a directive for an agent") for _, f in dead] == [True]


# -- the whole loop ----------------------------------------------------------------------------------


async def agent_state(url: str, agent: str) -> str | None:
    code, out, _ = await run([CLI, "status", "--json", "--group", GROUP, "--redis-url", url])
    if code != 0:
        return None
    for summary in orjson.loads(out):
        for record in summary["agents"]:
            if record["agent_id"] == agent:
                return str(record["state"])
    return None


def coordinator(url: str, log: Path) -> subprocess.Popen[bytes]:
    return start(["coordinator", "--lease-ttl", "1000", "--tick", "3600"], url, log)


async def answer_when_asked(url: str, agent: str) -> None:
    async def asked() -> bool:
        return await agent_state(url, agent) == AgentState.AWAITING_CLARIFICATION.value

    await wait_until(asked, 30, f"{agent} to wait for an answer")
    await run_ok([CLI, "answer", agent, "Q1=Analyze both", "--redis-url", url])


@pytest.mark.timeout(120)
async def test_full_loop_watch_and_response_file(redis_url: str, tmp_path: Path) -> None:
    out, responses = tmp_path / "agent.out", tmp_path / "responses.md"
    coord = coordinator(redis_url, tmp_path / "coordinator.log")
    agent = spawn(fake("say:starting", "clarify", f"await:{responses}", "complete", out=out, agent_id="L1"))
    log = tmp_path / "adapter.log"
    adapter = start(
        [
            "adapter",
            "watch",
            str(out),
            "--agent-id",
            "L1",
            "--group",
            GROUP,
            "--until-complete",
            "--deliver",
            f"file:{responses}",
        ],
        redis_url,
        log,
    )
    try:
        await answer_when_asked(redis_url, "L1")
        assert await exited(adapter, 60) == 0, log.read_text()
        assert await exited(agent, 30) == 0
        assert "A1: Analyze both" in responses.read_text()
        assert "Got: CLARIFICATION RESPONSE" in out.read_text()

        async def completed() -> bool:
            return await agent_state(redis_url, "L1") == AgentState.COMPLETED.value

        await wait_until(completed, 30, "the coordinator to see the completion")
    finally:
        coord.terminate()
        coord.wait(timeout=30)


@pytest.mark.timeout(120)
async def test_full_loop_run_and_resume_command(redis_url: str, tmp_path: Path) -> None:
    coord = coordinator(redis_url, tmp_path / "coordinator.log")
    resume = (
        f"command:{sys.executable} {Path(fake()[1])} --agent-id {{agent_id}} --resumed {{prompt}} complete"
    )
    log = tmp_path / "adapter.log"
    stdout = tmp_path / "stdout"
    with stdout.open("wb") as sink:
        adapter = start(
            [
                "adapter",
                "run",
                "--agent-id",
                "L2",
                "--group",
                GROUP,
                "--until-complete",
                "--deliver",
                resume,
                "--",
                *fake("say:starting", "clarify", agent_id="L2"),
            ],
            redis_url,
            log,
            stdout=sink,
        )
        try:
            await answer_when_asked(redis_url, "L2")
            assert await exited(adapter, 60) == 0, log.read_text()
        finally:
            coord.terminate()
            coord.wait(timeout=30)
    assert "- A1: Analyze both" in stdout.read_text()  # the resumed agent acknowledged the answer
    async with open_bus(redis_url) as bus:
        envelopes = [e for e in await bus.envelopes(GROUP) if e.agent_id == "L2" and e.kind is not Kind.HUMAN]
    said = [(e.type, e.source.count(":resume:")) for e in envelopes]
    # the adapter goes on resuming the agent after its first exit, not after its completion
    exits = [e.payload for e in envelopes if isinstance(e.payload, AgentExited)]
    assert [(x.resumable, x.completed) for x in exits] == [(True, False), (False, True)]
    assert said == [
        (T.AGENT_STARTED, 0),
        (T.CLARIFICATION_NEEDED, 0),
        (T.AGENT_EXITED, 0),
        (T.AGENT_STARTED, 1),
        (T.COMPLETION_REPORT, 1),
        (T.AGENT_EXITED, 1),
    ]


async def test_a_parent_told_of_a_directive_given_up_is_not_told_again_after_a_kill_9(
    redis_url: str, tmp_path: Path
) -> None:
    """Killed after telling the parent and before the dead letter (its connection cut at the XACK that
    goes with it): the restarted adapter gives the directive up again, and publishes no second
    STOP_WORK, which the coordinator's window may no longer know of by then."""
    failing = f"command:{sys.executable} -c 'import sys; sys.exit(\"resume refused\")'"
    args = idle_adapter(tmp_path, "d9", "--deliver", failing, "--max-attempts", "1", "--retry-ms", "100")
    log, proxy = tmp_path / "log", CuttingProxy(redis_url)
    async with open_bus(redis_url) as bus, proxy as proxy_url:
        first = start(args, proxy_url, log)
        await Publisher(bus.client, bus.keys).send_directive(directive(agent="d9"))
        await asyncio.wait_for(proxy.cut.wait(), 30)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        assert await bus.count(GROUP, T.STOP_WORK) == 1
        assert await bus.client.xlen(bus.stream(GROUP, StreamKind.DEAD)) == 0
        second = start(args, redis_url, log)

        async def dead() -> bool:
            return await bus.client.xlen(bus.stream(GROUP, StreamKind.DEAD)) == 1

        await wait_until(dead, 30, "the directive to be given up on again")
        second.send_signal(signal.SIGTERM)
        assert await exited(second, 20) == 0
        assert await bus.count(GROUP, T.STOP_WORK) == 1, log.read_text()
        [mark] = [key async for key in bus.client.scan_iter(match="*:undelivered:*")]
        assert MARK_TTL_S - 600 < await bus.client.ttl(mark) <= MARK_TTL_S  # not kept for ever
