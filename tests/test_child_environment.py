"""What the agent side hands down: an agent, its resume turns and a launcher's adapters get the starting
process's environment without the human key file (an agent must not sign a person's command) and without
its metrics port (README "Security")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from adapter_kit import exited, open_bus, start, wait_until

from bus.directives import AnswerItem, ClarificationResponse, LaunchReason, LaunchRequest
from bus.embedded import free_port
from bus.envelope import new_envelope
from bus.human_key import KEY_FILE_ENV
from bus.keys import StreamKind
from bus.ops import METRICS_PORT_ENV
from bus.publisher import Publisher

GROUP = "g-env"
_DUMPER = """\
import json, os, sys
with open(sys.argv[1], "w") as out:
    json.dump(dict(os.environ), out)
if len(sys.argv) > 2:
    print(f"[COMPLETION_REPORT]\\nagent_id: {sys.argv[2]}\\nstatus: success\\nsummary: done\\n[/COMPLETION_REPORT]")
"""


def _dumper(tmp_path: Path) -> list[str]:
    """A stand-in agent: ``... FILE [AGENT_ID]`` writes its environment to FILE (and completes)."""
    script = tmp_path / "dump_env.py"
    script.write_text(_DUMPER)
    return [sys.executable, str(script)]


def _environment(path: Path) -> dict[str, str]:
    environment: dict[str, str] = json.loads(path.read_text())
    return environment


def _parents_environment(tmp_path: Path) -> dict[str, str]:
    """A key file, and a variable that is handed down, in the starting process's environment."""
    key = tmp_path / "human.key"
    key.write_text("k" * 32)
    return {KEY_FILE_ENV: str(key), "SUBAGENT_BUS_LOG_JSON": "1"}


async def test_an_agent_and_its_resume_turn_get_no_human_key(redis_url: str, tmp_path: Path) -> None:
    first, resumed, log = tmp_path / "first.json", tmp_path / "resumed.json", tmp_path / "adapter.log"
    dumper = " ".join(_dumper(tmp_path))
    args = ["adapter", "run", "--agent-id", "e1", "--group", GROUP, "--until-complete"]
    args += ["--deliver", f"command:{dumper} {resumed} e1", "--", *_dumper(tmp_path), str(first)]
    async with open_bus(redis_url) as bus:
        answer = ClarificationResponse(answers=[AnswerItem(question_id="Q1", question="q?", answer="a")])
        directive = new_envelope(answer, agent_id="e1", group_id=GROUP, source="coordinator")
        await Publisher(bus.client, bus.keys).send_directive(directive)
        adapter = start(args, redis_url, log, env=_parents_environment(tmp_path))
        assert await exited(adapter, 60) == 0, log.read_text()
    for path in (first, resumed):
        environment = _environment(path)
        assert KEY_FILE_ENV not in environment
        assert environment["SUBAGENT_BUS_LOG_JSON"] == "1"  # the rest is handed down


async def test_a_launchers_adapters_and_agents_get_no_human_key_and_no_metrics_port(
    redis_url: str, tmp_path: Path
) -> None:
    dumped, log = tmp_path / "agent.json", tmp_path / "launcher.log"
    template = " ".join([*_dumper(tmp_path), str(dumped), "{agent_id}"])
    args = ["launcher", "--command", template, "--prompt-dir", str(tmp_path / "prompts")]
    args += ["--log-dir", str(tmp_path / "logs")]
    env = {**_parents_environment(tmp_path), METRICS_PORT_ENV: str(free_port())}
    async with open_bus(redis_url) as bus:
        launch = LaunchRequest(
            request_id="req-e2", new_agent_id="e2", reason=LaunchReason.DELEGATION, task="t"
        )
        await Publisher(bus.client, bus.keys).publish(
            new_envelope(launch, agent_id="e2", group_id=GROUP), StreamKind.TASKS
        )
        launcher = start(args, redis_url, log, env=env)
        try:

            async def dumped_whole() -> bool:
                return dumped.exists() and dumped.read_text().endswith("}")

            await wait_until(dumped_whole, 60, "the launched agent to write its environment")
        finally:
            launcher.terminate()
            assert await exited(launcher, 30) == 0, log.read_text()
    environment = _environment(dumped)
    assert KEY_FILE_ENV not in environment
    assert METRICS_PORT_ENV not in environment
    assert environment["SUBAGENT_BUS_AGENT_ID"] == "e2"
