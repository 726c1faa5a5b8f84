"""The README's first command: `subagent-bus demo` plays every protocol with real processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

CLI = str(Path(sys.executable).parent / "subagent-bus")


@pytest.mark.timeout(400)
def test_demo_walks_through_every_protocol(redis_url: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [CLI, "demo", "--json", "--redis-url", redis_url, "--workdir", str(tmp_path), "--timeout", "300"],
        capture_output=True,
        check=False,
        timeout=360,
    )
    result = orjson.loads(done.stdout)
    assert done.returncode == 0, result["problems"]
    assert result["ok"] and result["problems"] == []
    kinds = {d["decision"] for d in result["decisions"]}
    assert {"question_answered", "blocker_resolved", "delegation_approved", "launch_requested",
            "delegation_denied", "retry_requested", "severity_conflict"} <= kinds  # fmt: skip
    assert sorted(c.split()[1] for c in result["human_commands"]) == ["answer", "deny", "resolve"]
    states = {a["agent_id"]: (a["state"], a["status"]) for a in result["group"]["agents"]}
    assert states["auditor"] == ("completed", "SUCCESS")
    assert states["qa"] == ("completed", "SUCCESS")
    assert states["scanner"] == ("failed", "FAILED")
    merged = {m["location"]: m for m in result["merged_findings"]}
    jwt = merged["src/config/jwt.ts:8"]
    assert jwt["agents"] == ["dependency-scanner", "qa-engineer", "security-auditor"]
    assert jwt["confidence"] == pytest.approx((95 + 78 + 70) / 3 + 10)
    assert jwt["severity_conflict"]


def test_demo_text_output_ends_with_the_summary(redis_url: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [CLI, "demo", "--redis-url", redis_url, "--workdir", str(tmp_path), "--timeout", "300"],
        capture_output=True,
        text=True,
        check=False,
        timeout=360,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    for heading in ("== Agents", "== Decisions", "== Human commands the demo typed", "== Merged findings"):
        assert heading in done.stdout
    assert "Every protocol played out" in done.stdout
