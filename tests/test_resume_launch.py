"""An agent a launcher started, whose adapter ended with it, is resumed by starting it again: real
coordinator, launcher, adapter and agent processes; the human acts through the CLI."""

from __future__ import annotations

import shlex
import signal
import subprocess
import time
from pathlib import Path

from adapter_kit import fake, start
from rules_kit import delegate
from test_coordinator_scenarios import CLI, GROUP, agent, coordinate, inbox, publish, sb, tasks

LEAD = "lead"


def launch_pending(url: str, tmp_path: Path, template: str, *extra: str) -> None:
    sb(url, "launcher", "--burst", "--command", template, "--prompt-dir", str(tmp_path / "prompts"),
       "--log-dir", str(tmp_path / "logs"), "--heartbeat", "60", *extra)  # fmt: skip


def test_a_recovered_delegate_whose_adapter_ended_is_launched_again_with_the_directive(
    redis_url: str, tmp_path: Path
) -> None:
    # the agent crashes unless its prompt says the error was fixed; the launcher passes no --deliver,
    # so each adapter ends with its agent
    argv = fake(
        "unless-prompt:ERROR FIXED=crash:3", "complete", agent_id="{agent_id}", prompt_file="{prompt_file}"
    )
    template = shlex.join(argv)
    publish(redis_url, LEAD, delegate(LEAD, priority="P1"))
    coordinate(redis_url)
    [request] = [t for t in tasks(redis_url) if t["type"] == "LAUNCH"]
    delegate_id = request["payload"]["new_agent_id"]

    launch_pending(redis_url, tmp_path, template)
    coordinate(redis_url)
    record = agent(redis_url, delegate_id)
    assert (record["state"], record["resume"]) == ("blocked", "relaunch"), record
    assert "note: its adapter ended with it: a launcher starts it again with the directive" in sb(
        redis_url, "inbox"
    )

    sb(redis_url, "recover", delegate_id, "--option", "retry_from_checkpoint")
    coordinate(redis_url)
    launches = [t["payload"] for t in tasks(redis_url) if t["type"] == "LAUNCH"]
    assert [(p["new_agent_id"], p["reason"]) for p in launches] == [
        (delegate_id, "delegation"),
        (delegate_id, "resume"),
    ]
    assert inbox(redis_url, delegate_id) == []  # nobody would read it

    launch_pending(redis_url, tmp_path, template)
    coordinate(redis_url)
    record = agent(redis_url, delegate_id)
    assert (record["state"], record["status"]) == ("completed", "SUCCESS"), record
    [prompt] = (tmp_path / "prompts").glob(f"*{delegate_id}*")
    text = prompt.read_text()
    assert "## ERROR FIXED" in text and "new session with the same agent id" in text


def test_a_delegate_stopped_with_its_launcher_is_launched_again_when_recovered(
    redis_url: str, tmp_path: Path
) -> None:
    # adapters that resume their agents (--until-complete), but the launcher is stopped (SIGTERM):
    # it stops its adapters, which stop their agents and read their inboxes no more
    record = tmp_path / "record"
    argv = fake("unless-prompt:ERROR FIXED=wait-file:/nonexistent", "complete", agent_id="{agent_id}",
                prompt_file="{prompt_file}", record=record)  # fmt: skip
    resume = shlex.join(fake("complete", agent_id="{agent_id}", resumed="{prompt}"))
    extra = ["--deliver", f"command:{resume}", "--until-complete"]
    publish(redis_url, LEAD, delegate(LEAD, priority="P1"))
    coordinate(redis_url)
    [request] = [t for t in tasks(redis_url) if t["type"] == "LAUNCH"]
    delegate_id = request["payload"]["new_agent_id"]
    launcher = start(
        ["launcher", "--command", shlex.join(argv), "--prompt-dir", str(tmp_path / "prompts"),
         "--log-dir", str(tmp_path / "logs"), *extra],
        redis_url, tmp_path / "launcher.log",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (record.exists() and "start" in record.read_text()):
            assert time.monotonic() < deadline, "the delegate did not start"
            time.sleep(0.05)
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=60) == 0, (tmp_path / "launcher.log").read_text()
    finally:
        if launcher.poll() is None:
            launcher.kill()
    coordinate(redis_url)
    assert agent(redis_url, delegate_id)["state"] == "blocked"

    sb(redis_url, "recover", delegate_id, "--option", "retry_from_checkpoint")
    coordinate(redis_url)
    assert [t["payload"]["reason"] for t in tasks(redis_url) if t["type"] == "LAUNCH"] == [
        "delegation",
        "resume",
    ]
    launch_pending(redis_url, tmp_path, shlex.join(argv), *extra)
    coordinate(redis_url)
    assert (agent(redis_url, delegate_id)["state"], agent(redis_url, delegate_id)["status"]) == (
        "completed",
        "SUCCESS",
    )


def test_an_answer_that_reached_the_inbox_of_a_session_that_then_ended_starts_it_again(
    redis_url: str, tmp_path: Path
) -> None:
    # the delegate asks, and its session ends (exit 0, no completion) only once the answer is in its
    # inbox, unread: its adapter (no --deliver) ends with it
    answered = tmp_path / "answered"
    argv = fake("unless-prompt:CLARIFICATION RESPONSE=clarify", f"wait-file:{answered}",
                "unless-prompt:CLARIFICATION RESPONSE=crash:0", "complete",
                agent_id="{agent_id}", prompt_file="{prompt_file}")  # fmt: skip
    template = shlex.join(argv)
    publish(redis_url, LEAD, delegate(LEAD, priority="P1"))
    coordinate(redis_url)
    [request] = [t for t in tasks(redis_url) if t["type"] == "LAUNCH"]
    delegate_id = request["payload"]["new_agent_id"]
    launcher = start(
        ["launcher", "--burst", "--command", template, "--prompt-dir", str(tmp_path / "prompts"),
         "--log-dir", str(tmp_path / "logs"), "--heartbeat", "60"],
        redis_url, tmp_path / "launcher.log",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while agent(redis_url, delegate_id)["state"] != "awaiting_clarification":
            assert time.monotonic() < deadline, "the delegate did not ask"
            coordinate(redis_url)
        sb(redis_url, "answer", delegate_id, "Q1=Both")
        coordinate(redis_url)
        assert [d["type"] for d in inbox(redis_url, delegate_id)] == ["CLARIFICATION_RESPONSE"]
        answered.touch()
        assert launcher.wait(timeout=60) == 0, (tmp_path / "launcher.log").read_text()
    finally:
        if launcher.poll() is None:
            launcher.kill()
    coordinate(redis_url)
    launches = [t["payload"] for t in tasks(redis_url) if t["type"] == "LAUNCH"]
    assert [(p["new_agent_id"], p["reason"]) for p in launches] == [
        (delegate_id, "delegation"),
        (delegate_id, "resume"),
    ]
    assert "## CLARIFICATION RESPONSE" in launches[1]["context"]

    launch_pending(redis_url, tmp_path, template)
    coordinate(redis_url)
    record = agent(redis_url, delegate_id)
    assert (record["state"], record["status"]) == ("completed", "SUCCESS"), record
    # the answer came with the new prompt: acknowledged in the inbox unread, no reader has it again
    listen = [
        CLI,
        "listen",
        "--agent-id",
        delegate_id,
        "--group",
        GROUP,
        "--timeout",
        "1",
        "--redis-url",
        redis_url,
    ]
    again = subprocess.run(listen, check=False, capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout) == (3, ""), again.stderr
