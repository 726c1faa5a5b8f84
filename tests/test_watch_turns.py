"""``adapter watch --pid P --until-complete --deliver command:...``: P's end ends the agent's turn, not
the watch. The file and the inbox are followed on, the agent resumed by the command (after that turn's
end is told), until it completes, as ``adapter run --until-complete`` does (real processes, a real
Redis)."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
from pathlib import Path

from adapter_kit import exited, open_bus, spawn, start, wait_until

from agents.watch_resume import Turns
from bus.directives import AnswerItem, ClarificationResponse
from bus.envelope import Envelope, EnvelopeType, new_envelope
from bus.events import AgentExited
from bus.publisher import Publisher

T = EnvelopeType
GROUP = "g-watch-turns"
QUESTION = (
    "[CLARIFICATION_NEEDED]\nagent_id: {}\nblocked_at: design\nreason: need a choice\n"
    "questions: [OAuth2 or JWT?]\n[/CLARIFICATION_NEEDED]\n"
)
COMPLETION = "[COMPLETION_REPORT]\nagent_id: {}\nstatus: success\nsummary: done\n[/COMPLETION_REPORT]\n"


def _watch(tmp_path: Path, agent: str, script: str) -> tuple[Path, subprocess.Popen[bytes], list[str]]:
    """The agent's output file with its question, a process standing for its first turn (``--pid``),
    and the adapter's arguments, whose resume command runs ``script`` (sh, with ``$OUT`` the file)."""
    out = tmp_path / "agent.out"
    out.write_text(QUESTION.format(agent))
    resume = tmp_path / "resume.sh"
    resume.write_text(f"OUT={out}\n{script}\n")
    turn = spawn(["sleep", "60"])
    args = ["adapter", "watch", str(out), "--agent-id", agent, "--group", GROUP, "--poll", "0.02"]
    args += ["--pid", str(turn.pid), "--until-complete", "--deliver", f"command:sh {resume}"]
    return out, turn, args


def _end(turn: subprocess.Popen[bytes]) -> None:
    turn.kill()
    turn.wait()


async def _answer(redis_url: str, agent: str) -> None:
    async with open_bus(redis_url) as bus:
        response = ClarificationResponse(answers=[AnswerItem(question_id="Q1", answer="JWT")])
        directive = new_envelope(response, agent_id=agent, group_id=GROUP, source="test")
        await Publisher(bus.client, bus.keys).send_directive(directive)


async def _published(redis_url: str) -> list[Envelope]:
    async with open_bus(redis_url) as bus:
        return [e for e in await bus.envelopes(GROUP) if e.type is not T.HEARTBEAT]


def _exits(envelopes: list[Envelope]) -> list[AgentExited]:
    return [e.payload for e in envelopes if isinstance(e.payload, AgentExited)]


async def _progress(redis_url: str, percent: int) -> bool:
    return any(getattr(e.payload, "percent", None) == percent for e in await _published(redis_url))


async def _exit_count(redis_url: str, n: int) -> bool:
    return len(_exits(await _published(redis_url))) >= n


async def _first_turn_ended(
    redis_url: str, tmp_path: Path, agent: str, script: str
) -> subprocess.Popen[bytes]:
    """The adapter of :func:`_watch`, once the first turn has asked its question and ended, and the
    adapter said so."""
    _, turn, args = _watch(tmp_path, agent, script)
    adapter = start(args, redis_url, tmp_path / "adapter.log")
    async with open_bus(redis_url) as bus:
        await wait_until(lambda: bus.has(GROUP, T.CLARIFICATION_NEEDED), 20, "the question")
    _end(turn)
    await wait_until(lambda: _exit_count(redis_url, 1), 20, "the end of the first turn")
    return adapter


async def test_a_directive_that_comes_after_the_turn_ended_resumes_the_agent_until_it_completes(
    redis_url: str, tmp_path: Path
) -> None:
    adapter = await _first_turn_ended(
        redis_url, tmp_path, "t1", f"printf '{COMPLETION.format('t1')}' >> $OUT"
    )
    assert adapter.poll() is None  # the watch goes on: the agent waits for its answer
    await _answer(redis_url, "t1")
    assert await exited(adapter, 30) == 0
    published = await _published(redis_url)
    assert [e.type for e in published] == [
        T.AGENT_STARTED, T.CLARIFICATION_NEEDED, T.AGENT_EXITED, T.COMPLETION_REPORT, T.AGENT_EXITED
    ]  # fmt: skip
    first, last = _exits(published)
    assert first.resumable is True and not first.completed  # the adapter resumes it, as `run` says
    assert last.completed


async def test_what_a_turn_resumed_after_the_process_ended_writes_is_published(
    redis_url: str, tmp_path: Path
) -> None:
    # The directive comes while the process runs: the command runs once its turn's end is told, and
    # writes the completion only once the test saw that end (when the old adapter stopped reading).
    go = tmp_path / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.05; done\nprintf '{COMPLETION.format('t2')}' >> $OUT"
    _, turn, args = _watch(tmp_path, "t2", script)
    adapter = start(args, redis_url, tmp_path / "adapter.log")
    async with open_bus(redis_url) as bus:
        await wait_until(lambda: bus.has(GROUP, T.CLARIFICATION_NEEDED), 20, "the question")
    await _answer(redis_url, "t2")
    _end(turn)
    await wait_until(lambda: _exit_count(redis_url, 1), 20, "the end of the first turn")
    go.touch()
    assert await exited(adapter, 30) == 0
    published = await _published(redis_url)
    assert [e.type for e in published][-2:] == [T.COMPLETION_REPORT, T.AGENT_EXITED]
    assert _exits(published)[-1].completed


async def test_a_watch_stopped_between_turns_says_nobody_resumes_the_agent(
    redis_url: str, tmp_path: Path
) -> None:
    adapter = await _first_turn_ended(redis_url, tmp_path, "t3", "exit 0")
    assert adapter.poll() is None
    adapter.send_signal(signal.SIGTERM)
    await exited(adapter, 30)
    assert [e.resumable for e in _exits(await _published(redis_url))] == [True, False]


async def test_a_resume_command_waits_for_the_turn_end_to_be_told(redis_url: str, tmp_path: Path) -> None:
    # As with `adapter run`: the AGENT_EXITED of a turn comes before anything the next turn writes.
    _, turn, args = _watch(tmp_path, "t4", f"printf '{COMPLETION.format('t4')}' >> $OUT")
    adapter = start(args, redis_url, tmp_path / "adapter.log")
    async with open_bus(redis_url) as bus:
        await wait_until(lambda: bus.has(GROUP, T.CLARIFICATION_NEEDED), 20, "the question")
    await _answer(redis_url, "t4")
    await asyncio.to_thread(_end, turn)
    assert await exited(adapter, 30) == 0
    assert [e.type for e in await _published(redis_url)] == [
        T.AGENT_STARTED, T.CLARIFICATION_NEEDED, T.AGENT_EXITED, T.COMPLETION_REPORT, T.AGENT_EXITED
    ]  # fmt: skip


async def test_a_resumed_turn_that_wrote_nothing_ends_under_an_id_of_its_own(
    redis_url: str, tmp_path: Path
) -> None:
    # Both turns end with the file read to the same byte: the second end's id was the first's, which a
    # coordinator drops as a repeat.
    adapter = await _first_turn_ended(redis_url, tmp_path, "t5", "exit 0")
    await _answer(redis_url, "t5")
    await wait_until(lambda: _exit_count(redis_url, 2), 20, "the end of the resumed turn")
    adapter.send_signal(signal.SIGTERM)
    await exited(adapter, 30)
    exits = [e for e in await _published(redis_url) if e.type is T.AGENT_EXITED]
    assert [e.payload.resumable for e in exits if isinstance(e.payload, AgentExited)] == [True, True, False]
    assert len({e.id for e in exits}) == 3


async def test_a_resume_command_that_cannot_start_is_no_turn(redis_url: str, tmp_path: Path) -> None:
    # The program comes from the output ({session_id}): it is looked for at each delivery. Counted as a
    # turn, its failure was told as the end of one, the adapter saying it resumes the agent once more.
    out, turn, args = _watch(tmp_path, "t6", "exit 0")
    args[args.index("--deliver") + 1] = "command:{session_id}"
    adapter = start(
        [*args, "--session-id", "no-such-program-t6", "--max-attempts", "1"], redis_url, tmp_path / "log"
    )
    async with open_bus(redis_url) as bus:
        await wait_until(lambda: bus.has(GROUP, T.CLARIFICATION_NEEDED), 20, "the question")
        _end(turn)
        await wait_until(lambda: _exit_count(redis_url, 1), 20, "the end of the first turn")
        await _answer(redis_url, "t6")
        await wait_until(lambda: bus.has(GROUP, T.STOP_WORK), 20, "the delivery given up on")
        for percent in (10, 20):  # the watch has gone round since: a turn's end would be told by now
            with out.open("a") as agent:
                agent.write(f"[PROGRESS]\nagent_id: t6\npercent: {percent}\n[/PROGRESS]\n")
            await wait_until(functools.partial(_progress, redis_url, percent), 20, f"progress {percent}")
    adapter.send_signal(signal.SIGTERM)
    await exited(adapter, 30)
    assert [e.resumable for e in _exits(await _published(redis_url))] == [True, False]


def test_a_resume_command_waits_for_a_running_turn_once_the_file_is_no_longer_watched() -> None:
    # The watch may end first (SIGUSR1, --idle-stop, an error): a resume command then ran beside the
    # turn still running, two turns of one session at once.
    turns = Turns(os.getpid())
    turns.unwatched = True
    assert turns.current()
    ended = Turns(2**22 + 12345)  # no such process (above the largest pid Linux gives)
    ended.unwatched = True
    assert not ended.current()
