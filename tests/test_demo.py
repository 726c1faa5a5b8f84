"""The README's first command: `subagent-bus demo` plays every protocol with real processes."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.embedded import free_port
from coordinator.demo import _Demo

CLI = str(Path(sys.executable).parent / "subagent-bus")


def demo_json(redis_url: str, tmp_path: Path, timeout: str) -> tuple[int, dict[str, Any]]:
    """``demo --json``'s exit status and outcome."""
    done = subprocess.run(
        [CLI, "demo", "--json", "--redis-url", redis_url, "--workdir", str(tmp_path), "--timeout", timeout],
        capture_output=True,
        check=False,
        timeout=float(timeout) + 60,
    )
    return done.returncode, orjson.loads(done.stdout)


@pytest.mark.timeout(400)
def test_demo_walks_through_every_protocol(redis_url: str, tmp_path: Path) -> None:
    code, result = demo_json(redis_url, tmp_path, "300")
    assert code == 0, result["problems"]
    assert result["ok"] and result["problems"] == []
    kinds = {d["decision"] for d in result["decisions"]}
    assert {"question_answered", "blocker_resolved", "delegation_approved", "launch_requested",
            "delegation_denied", "retry_requested", "severity_conflict"} <= kinds  # fmt: skip
    assert sorted(c.split()[1] for c in result["human_commands"]) == ["answer", "deny", "resolve"]
    assert all(c.endswith(f" --namespace {result['namespace']}") for c in result["human_commands"])
    states = {a["agent_id"]: (a["state"], a["status"]) for a in result["group"]["agents"]}
    assert states["auditor"] == ("completed", "SUCCESS")
    assert states["qa"] == ("completed", "SUCCESS")
    assert states["scanner"] == ("failed", "FAILED")
    # each agent prints a result and a COMPLETION_REPORT that agree: one completion each
    completed = [d["agent_id"] for d in result["decisions"] if d["decision"] == "completed"]
    assert sorted(completed) == sorted(states)
    # the summary waits for the agents' exits: its counts are the final ones that status shows
    status = subprocess.run(
        [CLI, "status", "--json", "--redis-url", redis_url, "--namespace", result["namespace"]],
        capture_output=True,
        check=True,
        timeout=60,
    )
    final = {a["agent_id"]: a["applied"] for group in orjson.loads(status.stdout) for a in group["agents"]}
    assert {a["agent_id"]: a["applied"] for a in result["group"]["agents"]} == final
    merged = {m["location"]: m for m in result["merged_findings"]}
    jwt = merged["src/config/jwt.ts:8"]
    assert jwt["agents"] == ["dependency-scanner", "qa-engineer", "security-auditor"]
    assert jwt["confidence"] == pytest.approx((95 + 78 + 70) / 3 + 10)
    assert jwt["severity_conflict"]


def test_demo_text_output_ends_with_the_summary(redis_url: str, tmp_path: Path) -> None:
    # Settings of a real bus in the environment are not the demo processes': one metrics port for all
    # of them would have every one but the first exit, and a policy there would change the script.
    env = {**os.environ, "SUBAGENT_BUS_METRICS_PORT": str(free_port()), "SUBAGENT_BUS_POLICY": "/nonexistent"}
    done = subprocess.run(
        [CLI, "demo", "--redis-url", redis_url, "--workdir", str(tmp_path), "--timeout", "300"],
        capture_output=True,
        text=True,
        check=False,
        timeout=360,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    for heading in ("== Agents", "== Decisions", "== Human commands the demo typed", "== Merged findings"):
        assert heading in done.stdout
    assert (
        f"Every protocol played out. Explore: subagent-bus status --redis-url {redis_url} --namespace sbus-demo-"
        in (done.stdout)
    )


def _descendants(pid: int) -> set[int]:
    children: dict[int, set[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), set()).add(int(stat.parent.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), set()) - found:
            found.add(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # it ended meanwhile
        return b""


def _started_demo(redis_url: str, tmp_path: Path) -> subprocess.Popen[str]:
    """A demo, once it says it started its processes (started as from a terminal: a suite run under
    ``nohup`` would hand it a SIGHUP it is to keep ignoring)."""
    demo = subprocess.Popen(
        [CLI, "demo", "--redis-url", redis_url, "--workdir", str(tmp_path), "--timeout", "300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),  # noqa: PLW1509 (no threads)
    )
    assert demo.stdout is not None
    for line in demo.stdout:
        if line.startswith("started a coordinator, a launcher"):
            break
    return demo


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda sig: sig.name)
def test_a_stop_signal_stops_every_process_the_demo_started(redis_url: str, tmp_path: Path, sig: int) -> None:
    """SIGHUP too: the demo's terminal closed, it would otherwise leave its processes running."""
    demo = _started_demo(redis_url, tmp_path)
    started: set[int] = set()
    try:
        started = _descendants(demo.pid)
        assert len(started) >= 5  # a coordinator, a launcher, three adapters
        demo.send_signal(sig)
        demo.communicate(timeout=90)
        assert demo.returncode == 128 + sig
        assert [pid for pid in started if _running(pid)] == []
    finally:
        for pid in started:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        if demo.poll() is None:
            demo.kill()


def test_a_namespace_too_long_for_the_demo_s_suffix_is_refused_at_once(tmp_path: Path) -> None:
    """The demo plays in NAMESPACE-demo-xxxxxx, at most 64 characters: a longer one is a usage error before
    anything starts (every process it started refused it, and the demo waited out its timeout)."""
    args = ["demo", "--redis-url", "redis://127.0.0.1:1/0", "--workdir", str(tmp_path)]
    command = [CLI, *args, "--namespace", "n" * 53]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "at most 52 characters for the demo, which adds '-demo-' and six hex digits" in done.stderr


@pytest.mark.timeout(120)
def test_a_coordinator_that_dies_ends_the_demo_at_once_saying_so(redis_url: str, tmp_path: Path) -> None:
    demo = _started_demo(redis_url, tmp_path)
    try:
        [coordinator] = [pid for pid in _descendants(demo.pid) if b"\0coordinator\0" in _cmdline(pid)]
        os.kill(coordinator, signal.SIGKILL)
        out, _ = demo.communicate(timeout=60)  # not the 300 s of --timeout
        assert demo.returncode == 1
        assert "coordinator was killed by SIGKILL" in out
    finally:
        if demo.poll() is None:
            demo.kill()


def test_a_process_s_log_is_not_left_open_in_the_demo(tmp_path: Path) -> None:
    """Each process writes its log through its own descriptor: the demo closes its copy at once, rather
    than holding one file per process open until the garbage collector finds it."""
    demo = _Demo("redis://127.0.0.1:1/0", "n", tmp_path, print)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        demo.spawn("version", ["--version"])
        gc.collect()
    assert demo.processes["version"].wait(timeout=60) == 0
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert (tmp_path / "version.log").read_bytes()


def test_a_demo_out_of_time_names_the_folder_of_its_logs(redis_url: str, tmp_path: Path) -> None:
    code, result = demo_json(redis_url, tmp_path, "0.1")
    assert code == 1 and not result["ok"]
    said = f"the group did not settle in time (see the logs in {tmp_path / result['namespace']})"
    assert said in result["problems"], result["problems"]
