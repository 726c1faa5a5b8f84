"""Where a group's state lives: merged findings in their own hash, beside the group hash.

`status`, `inbox` and the human commands read the group hash and only count the merged findings, so
that they take one command per group whatever it merged; a coordinator and `findings --merged` read
every slot. States that 0.1.0 wrote (slots as `f:<key>` fields of the group hash) are still read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from workers.kit import connected

from bus.connection import as_text
from bus.envelope import Envelope, new_envelope
from bus.findings import Finding
from bus.keys import Keys, open_namespace
from bus.publisher import Publisher
from coordinator.policy import Policy
from coordinator.service import Coordinator, CoordinatorOptions
from coordinator.state import FindingSlot
from coordinator.store import group_key, merged_key
from coordinator.view import load_shard

CLI = str(Path(sys.executable).parent / "subagent-bus")
NS = "layout"
GROUP = "audit"


def _finding(agent: str, n: int, *, severity: str = "high") -> Envelope:
    finding = Finding.model_validate(
        {"title": f"issue {n}", "file": f"src/m{n}.py", "line": 3, "category": "SEC", "severity": severity}
    )
    return new_envelope(finding, agent_id=agent, group_id=GROUP, source="test")


async def _apply(url: str, envelopes: list[Envelope]) -> Keys:
    async with connected(url) as client:
        keys = await open_namespace(client, NS, 2)
        await Publisher(client, keys).publish_many(envelopes)
        assert await Coordinator(client, keys, Policy(), CoordinatorOptions(name="c")).run(burst=True) == len(
            envelopes
        )
        return keys


def _cli(url: str, *args: str) -> str:
    done = subprocess.run(
        [CLI, *args, "--namespace", NS],
        env={**os.environ, "SUBAGENT_BUS_REDIS_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _status_findings(url: str) -> int:
    (group,) = orjson.loads(_cli(url, "status", "--json"))
    count: int = group["findings"]
    return count


def _merged(url: str) -> dict[str, list[str]]:
    """Merged findings by title: their agents."""
    out = _cli(url, "findings", "--merged", "--jsonl")
    return {r["finding"]["title"]: r["agents"] for r in map(orjson.loads, out.splitlines())}


async def test_views_and_human_commands_count_the_merged_findings_without_reading_them(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    keys = await _apply(redis_url, [_finding("scanner", n) for n in range(300)])
    async with connected(redis_url) as client:
        shard = keys.shard_of(GROUP)
        assert await client.hlen(merged_key(keys, shard, GROUP)) == 300
        await client.config_resetstat()
        assert _status_findings(redis_url) == 300
        _cli(redis_url, "inbox", "--json")
        stats = await client.info("commandstats")
    # one HGETALL per command (the group hash); the slots are counted (HLEN), never read
    assert stats["cmdstat_hgetall"]["calls"] == 2
    assert stats["cmdstat_hlen"]["calls"] == 2
    assert "cmdstat_hscan" not in stats and "cmdstat_hkeys" not in stats
    assert len(_merged(redis_url)) == 300  # the merged view reads them all


async def test_slots_kept_in_the_group_hash_by_0_1_0_are_read_and_merged_again(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    keys = await _apply(redis_url, [_finding("scanner", n) for n in range(3)])
    shard = keys.shard_of(GROUP)
    async with connected(redis_url) as client:  # back to 0.1.0's layout
        slots = merged_key(keys, shard, GROUP)
        old = {as_text(k): v for k, v in (await client.hgetall(slots)).items()}
        await client.hset(group_key(keys, shard, GROUP), mapping={f"f:{k}": v for k, v in old.items()})
        await client.delete(slots)
    assert _status_findings(redis_url) == 3
    assert _merged(redis_url) == {f"issue {n}": ["scanner"] for n in range(3)}

    # a second agent agrees on issue 0 (a slot moves to the new hash) and reports a new one
    await _apply(redis_url, [_finding("reviewer", 0), _finding("reviewer", 7)])
    assert _status_findings(redis_url) == 4
    merged = _merged(redis_url)
    assert merged["issue 0"] == ["reviewer", "scanner"] and merged["issue 7"] == ["reviewer"]
    async with connected(redis_url) as client:
        state = (await load_shard(client, keys, shard))[GROUP]
    assert len(state.findings) == 4


async def test_a_slot_in_both_hashes_holds_both_reports_and_old_conflicts_are_counted(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """During an upgrade, coordinators of both versions may each write a slot (0.1.0's in the group hash);
    and 0.1.0's meta has no count of severity conflicts."""
    monkeypatch.chdir(tmp_path)
    keys = await _apply(redis_url, [_finding("scanner", 0), _finding("reviewer", 0, severity="low")])
    shard = keys.shard_of(GROUP)
    async with connected(redis_url) as client:
        slots, group = merged_key(keys, shard, GROUP), group_key(keys, shard, GROUP)
        ((key, raw),) = (await client.hgetall(slots)).items()
        old = FindingSlot.model_validate_json(raw)  # as 0.1.0 stored it: without the scanner's report
        legacy = old.model_copy(update={"reports": {"reviewer": old.reports["reviewer"]}})
        await client.hset(
            slots,
            key,
            old.model_copy(update={"reports": {"scanner": old.reports["scanner"]}}).model_dump_json(),
        )
        await client.hset(group, f"f:{as_text(key)}", legacy.model_dump_json())
        meta = orjson.loads(await client.hget(group, "meta") or b"{}")
        assert meta.pop("severity_conflicts") == 1
        await client.hset(group, "meta", orjson.dumps(meta))
    assert _status_findings(redis_url) == 1
    (status,) = orjson.loads(_cli(redis_url, "status", "--json"))
    assert status["severity_conflicts"] == 1
    assert _merged(redis_url) == {"issue 0": ["reviewer", "scanner"]}
    async with connected(redis_url) as client:
        state = (await load_shard(client, keys, shard))[GROUP]
    (slot,) = state.findings.values()
    assert set(slot.reports) == {"reviewer", "scanner"} and state.severity_conflicts == 1
