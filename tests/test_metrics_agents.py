"""`adapter run` and `launcher` with --metrics-port and --log-json: real processes, scraped endpoints."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson
from adapter_kit import CLI, Bus, exited, fake, open_bus, start, wait_until
from prometheus_client.parser import text_string_to_metric_families

from bus.directives import AnswerItem, ClarificationResponse, LaunchReason, LaunchRequest
from bus.embedded import free_port
from bus.envelope import EnvelopeType, new_envelope
from bus.keys import StreamKind
from bus.publisher import Publisher

T = EnvelopeType
GROUP = "g-metrics"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
FAILURES = "subagent_bus_adapter_delivery_failures_total"
DELIVERED = "subagent_bus_adapter_directives_delivered_total"

BROKEN = "[STOP_WORK]\nagent_id: m1\nstop_reason: nonsense\n[/STOP_WORK]"
REPORT = (
    "## Security Auditor Result\n\n### Status\nSUCCESS\n\n### Summary\nAudited the login module.\n\n"
    "### Review\n| Issue | Location | Severity |\n|---|---|---|\n"
    "| SQL built by concatenation | `src/db/query.ts:12` | High |\n"
    "| Token in a log line | `src/auth/log.ts:40` | Medium |\n"
)


def _scrape(port: int) -> Samples | None:
    """Every sample the endpoint serves, or None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


class Endpoint:
    """The metrics endpoint of one process; ``samples`` is the last scrape."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.samples: Samples = {}

    async def scrape(self) -> Samples:
        scraped = await asyncio.to_thread(_scrape, self.port)
        self.samples = scraped or {}
        return self.samples

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def published(self) -> dict[str, float]:
        """The adapter's ``entries_out`` by envelope type."""
        return {
            dict(labels)["type"]: value
            for (name, labels), value in self.samples.items()
            if name == "subagent_bus_entries_out_total" and ("role", "adapter") in labels
        }

    async def until(self, condition: Callable[[Endpoint], bool], what: str, seconds: float = 30) -> None:
        """Scrape until ``condition`` holds."""

        async def holds() -> bool:
            await self.scrape()
            return condition(self)

        await wait_until(holds, seconds, what)


def json_lines(log: Path) -> list[dict[str, object]]:
    """Every line of a log; each must be one JSON object."""
    lines = log.read_text().splitlines()
    assert lines
    records = [orjson.loads(line) for line in lines]
    assert all(isinstance(r, dict) and {"ts", "level", "logger", "message"} <= set(r) for r in records)
    return records


async def test_adapter_counts_what_it_publishes_reads_rejects_and_delivers(
    redis_url: str, tmp_path: Path
) -> None:
    endpoint = Endpoint(free_port())
    responses = tmp_path / "inbox" / "responses.md"  # its directory is away while a delivery fails
    responses.parent.mkdir()
    go, log, stdout = tmp_path / "go", tmp_path / "adapter.log", tmp_path / "stdout"
    steps = fake(
        f"say:{BROKEN}", "progress:40", f"say:{REPORT}", "clarify", f"await:{responses}", "complete",
        f"wait-file:{go}", agent_id="m1",
    )  # fmt: skip
    args = [
        "adapter", "run", "--agent-id", "m1", "--group", GROUP, "--deliver", f"file:{responses}",
        "--retry-ms", "100", "--max-attempts", "1000", "--heartbeat", "0.2",
        "--metrics-port", str(endpoint.port), "--log-json", "--", *steps,
    ]  # fmt: skip
    with stdout.open("wb") as sink:
        adapter = start(args, redis_url, log, stdout=sink)
    try:
        async with open_bus(redis_url) as bus:
            await endpoint.until(lambda e: e.published().get(T.CLARIFICATION_NEEDED) == 1, "the question")
            responses.parent.rmdir()
            answer = ClarificationResponse(answers=[AnswerItem(question_id="Q1", answer="both")])
            directive = new_envelope(answer, agent_id="m1", group_id=GROUP, source="test")
            await Publisher(bus.client, bus.keys).send_directive(directive)

            await endpoint.until(
                lambda e: (e.value(FAILURES, type=T.CLARIFICATION_RESPONSE) or 0) >= 1, "a failure"
            )
            responses.parent.mkdir()

            async def all_counted() -> bool:
                """What was published, as counted, is what the stream holds (heartbeats keep coming)."""
                on_stream = Counter(e.type.value for e in await bus.envelopes(GROUP) if e.agent_id == "m1")
                await endpoint.scrape()
                published = endpoint.published()
                # the answer's delivery is counted once its file is written and synced: the agent may
                # read it, and complete, first
                delivered = endpoint.value(DELIVERED, type=T.CLARIFICATION_RESPONSE)
                return (
                    published == on_stream
                    and published.get(T.COMPLETION_REPORT) == 1
                    and bool(published.get(T.HEARTBEAT))
                    and delivered is not None
                )

            await wait_until(all_counted, 30, "the completion report and heartbeats to be counted")
        counts = endpoint.published()
        assert {t: n for t, n in counts.items() if t != T.HEARTBEAT} == {
            T.AGENT_STARTED: 1,
            T.PROGRESS: 1,
            T.RESULT: 1,
            T.CLARIFICATION_NEEDED: 1,
            T.COMPLETION_REPORT: 1,
            T.STOP_WORK: 1,  # the error published in place of the broken STOP_WORK
        }
        value = endpoint.value
        assert value("subagent_bus_adapter_findings_total") == 2
        assert value("subagent_bus_adapter_rejected_total", reason="parse_error") == 1
        assert value("subagent_bus_adapter_rejected_total", reason="too_large") == 0
        assert value(DELIVERED, type=T.CLARIFICATION_RESPONSE) == 1
        failures = value(FAILURES, type=T.CLARIFICATION_RESPONSE)
        assert failures is not None and failures >= 1
        assert value("subagent_bus_adapter_info", agent_id="m1", group_id=GROUP) == 1
        read = value("subagent_bus_adapter_read_bytes_total")
        go.touch()
        assert await exited(adapter, 30) == 0, log.read_text()
    finally:
        if adapter.poll() is None:
            adapter.kill()
    assert read == stdout.stat().st_size  # every byte the agent printed was read (and copied to stdout)
    records = json_lines(log)
    assert {(r["agent_id"], r["group_id"]) for r in records} == {("m1", GROUP)}
    messages = [str(r["message"]) for r in records]
    assert sum("delivering CLARIFICATION_RESPONSE" in m and "failed" in m for m in messages) == failures
    assert any(m.startswith("delivered CLARIFICATION_RESPONSE") for m in messages)
    assert any("not published: STOP_WORK block" in m for m in messages)

    # what went wrong is a warning, for log pipelines that keep only those; the rest is information
    def levels(text: str) -> set[object]:
        return {r["level"] for r in records if text in str(r["message"])}

    assert levels("not published: STOP_WORK block") == {"warning"}
    assert levels("delivering CLARIFICATION_RESPONSE") == {"warning"}  # its failures
    assert levels("delivered CLARIFICATION_RESPONSE") == {"info"}


async def request(bus: Bus, agent: str) -> None:
    launch = LaunchRequest(
        request_id=f"req-{agent}", new_agent_id=agent, reason=LaunchReason.DELEGATION, task=f"Task of {agent}"
    )
    envelope = new_envelope(launch, agent_id=agent, group_id=GROUP)
    await Publisher(bus.client, bus.keys).publish(envelope, StreamKind.TASKS)


async def test_launcher_counts_tasks_launches_failures_and_running_agents(
    redis_url: str, tmp_path: Path
) -> None:
    endpoint = Endpoint(free_port())
    go, log, logs = tmp_path / "go", tmp_path / "launcher.log", tmp_path / "logs"
    (logs / "bad-1.log").mkdir(parents=True)  # the agent log cannot be opened: that launch fails
    template = " ".join(fake("complete", f"wait-file:{go}", agent_id="{agent_id}"))
    args = [
        "launcher", "--command", template, "--prompt-dir", str(tmp_path / "prompts"), "--log-dir", str(logs),
        "--max-attempts", "1",
    ]  # fmt: skip
    env = {"SUBAGENT_BUS_METRICS_PORT": str(endpoint.port), "SUBAGENT_BUS_LOG_JSON": "1"}
    async with open_bus(redis_url) as bus:
        await request(bus, "good-1")
        await request(bus, "bad-1")
        launcher = start(args, redis_url, log, env=env)  # the options from the environment
        try:
            await endpoint.until(
                lambda e: (
                    e.value("subagent_bus_launcher_launched_total") == 1
                    and e.value("subagent_bus_launcher_launch_failures_total") == 1
                ),
                "one launch and one failure",
            )
            tasks = endpoint.value("subagent_bus_entries_in_total", role="launcher", type=T.LAUNCH)
            assert tasks == 2
            assert endpoint.value("subagent_bus_agents_running") == 1

            async def completed() -> bool:  # its adapter did not inherit the launcher's port
                return await bus.has(GROUP, T.COMPLETION_REPORT)

            await wait_until(completed, 30, "the launched agent to complete")
            go.touch()
            await endpoint.until(lambda e: e.value("subagent_bus_agents_running") == 0, "the agent to end")
            launcher.terminate()
            assert await exited(launcher, 30) == 0, log.read_text()
        finally:
            if launcher.poll() is None:
                launcher.kill()
    records = json_lines(log)
    about = {
        str(r["agent_id"]): r for r in records if str(r["message"]).startswith(("launched", "cannot start"))
    }
    assert set(about) == {"good-1", "bad-1"}
    assert all(r["group_id"] == GROUP for r in about.values())
    assert about["bad-1"]["level"] == "warning"
    assert about["good-1"]["request_id"] == "req-good-1"
    ended = [r for r in records if str(r["message"]).startswith("agent good-1 ended")]
    assert [(r["agent_id"], r["group_id"], r["exit_code"]) for r in ended] == [("good-1", GROUP, 0)]
    assert "started 1 agent(s)" in str(records[-1]["message"])


def test_a_metrics_port_in_use_is_an_error_before_anything_starts(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ops = ["--metrics-port", str(port), "--redis-url", "redis://127.0.0.1:1"]
        for command in (
            ["adapter", "run", "--agent-id", "x", "--group", GROUP, *ops, "--", "touch", str(marker)],
            ["launcher", "--command", f"touch {marker}", *ops],
            ["coordinator", "--burst", *ops],
        ):
            done = subprocess.run([CLI, *command], capture_output=True, check=False, timeout=60, cwd=tmp_path)
            assert done.returncode == 1, done.stderr
            assert f"cannot serve metrics on 127.0.0.1:{port}" in done.stderr.decode()
    assert not marker.exists()
