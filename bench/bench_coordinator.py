"""End-to-end coordinator benchmark on a real server started for the run.

    python -m bench.bench_coordinator [--quick] [--signals N] [--rounds R] [--rss-signals N]

1. throughput: signals published up front, then applied by a coordinator (in burst mode: read, rules,
   one commit script per batch with state + emitted entries + XACK) vs the raw redis-py consume loop
   (XREADGROUP COUNT 100 + orjson + Envelope.model_validate + XACK, no rules, no state) on the same data,
   in the same run, and vs FastStream's Redis Streams batch consumer when it is installed
   (``pip install -e '.[bench]'``); reported for the mixed workload and for findings alone, each over
   ``--rounds`` rounds (the best round's rates, the median and range of the per-round ratios);
2. latency: a coordinator process (``subagent-bus coordinator``) while a publisher sends 2 000 signals/s;
   a subscriber follows the findings stream, where each applied signal shows up, and measures
   publish -> decision visible (p50/p99), after two seconds of the same load that are not recorded; then
   the same for the raw relay (:mod:`bench.raw_relay`: read, validate, copy to the findings stream, ack)
   in place of the coordinator, the floor that the machine and the measuring process set;
3. memory: the coordinator process's RSS before and after applying ``--rss-signals`` signals.

The workload (:func:`workload`) is what a team of agents sends: 10 groups of 5 agents; each agent first
announces itself (AGENT_STARTED), then sends a deterministic pseudo-random mix of 50% FINDING, 35%
PROGRESS and 15% HEARTBEAT. Findings name places from a bounded set of 200 locations per group (40 files,
5 lines each), as real agents report tens to hundreds of distinct findings per group: one location is
reported by several agents (merged into one finding, with their agreement) and again as work goes on,
with a confidence between 50 and 99; 1 report in 20 names another severity than the location's own,
which opens a severity conflict (one decision per merged finding). The latency phase sends findings
only (:func:`findings_only`, the same locations), so that every signal produces an entry the subscriber
can see.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from bench.arguments import above_zero, at_least_one, sizes
from bus.connection import Client, connect
from bus.embedded import RedisProcess
from bus.envelope import Envelope, Payload, new_envelope
from bus.events import AgentStarted, Heartbeat
from bus.findings import Finding, Severity
from bus.keys import Keys, StreamKind, open_namespace
from bus.publisher import Publisher
from bus.settings import Settings
from bus.signals import Progress
from coordinator.policy import Policy
from coordinator.runtime import tune_gc
from coordinator.service import GROUP, Coordinator, CoordinatorOptions

CLI = str(Path(sys.executable).parent / "subagent-bus")
GROUPS = 10
AGENTS = 50
KINDS = ("security-auditor", "qa-engineer", "code-explorer", "perf-reviewer", "docs-checker")
FILES, LINES = 40, 5
SEVERITIES = (Severity.CRITICAL, Severity.IMPORTANT, Severity.MINOR)
CATEGORIES = ("SEC", "QA", "PERF")


def _mix(i: int) -> int:
    """A pseudo-random 32-bit number for signal ``i`` (murmur3's finalizer: any slice is reproducible)."""
    h = (i + 0x9E3779B9) & 0xFFFFFFFF
    h = ((h ^ h >> 16) * 0x85EBCA6B) & 0xFFFFFFFF
    h = ((h ^ h >> 13) * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ h >> 16


def _kind(agent: int) -> str:
    """The agent's kind; the 5 agents of a group are of 5 kinds."""
    return KINDS[(agent // GROUPS) % len(KINDS)]


def _finding(i: int, agent: int, bits: int) -> Finding:
    location = bits % (FILES * LINES)
    file, line = divmod(location, LINES)
    severity = SEVERITIES[location % 3]
    if (bits >> 8) % 20 == 0:
        severity = SEVERITIES[(location + 1) % 3]
    return Finding(
        title=f"agent-{agent}#{i}",
        file=f"src/module_{file}.py",
        line=10 + 7 * line,
        category=CATEGORIES[location % 3],
        severity=severity,
        confidence=50 + (bits >> 16) % 50,
        agent=_kind(agent),
    )


def _signal(i: int) -> Envelope:
    agent = i % AGENTS
    bits = _mix(i)
    payload: Payload
    if i < AGENTS:
        payload = AgentStarted(name=_kind(agent), task="review the module", pid=1000 + agent)
    elif bits % 100 < 50:
        payload = _finding(i, agent, bits >> 7)
    elif bits % 100 < 85:
        payload = Progress(
            agent_id=f"agent-{agent}", percent=(i // AGENTS) % 100, message=f"step {i // AGENTS}"
        )
    else:
        payload = Heartbeat(pid=1000 + agent)
    return new_envelope(payload, agent_id=f"agent-{agent}", group_id=f"group-{agent % GROUPS}")


def workload(count: int, *, start: int = 0) -> list[Envelope]:
    """Signals ``start`` to ``start + count`` of the mixed workload (see the module docstring)."""
    return [_signal(i) for i in range(start, start + count)]


def findings_only(count: int, *, start: int = 0) -> list[Envelope]:
    """FINDING signals over the same agents and locations; each applied one appears on the findings stream."""
    out = []
    for i in range(start, start + count):
        agent = i % AGENTS
        finding = _finding(i, agent, _mix(i))
        out.append(new_envelope(finding, agent_id=f"agent-{agent}", group_id=f"group-{agent % GROUPS}"))
    return out


async def publish_all(client: Client, keys: Keys, envelopes: list[Envelope]) -> None:
    publisher = Publisher(client, keys)
    for i in range(0, len(envelopes), 100):
        await publisher.publish_many(envelopes[i : i + 100])


async def raw_consume(client: Client, keys: Keys, total: int) -> float:
    """The baseline: a bare consumer-group loop over the same streams."""
    for shard in keys.all_shards():
        await client.xgroup_create(keys.stream(shard, StreamKind.SIGNALS), "raw", id="0", mkstream=True)
    started = time.perf_counter()
    done = 0
    while done < total:
        for shard in keys.all_shards():
            stream = keys.stream(shard, StreamKind.SIGNALS)
            reply: Any = await client.xreadgroup("raw", "raw-1", {stream: ">"}, count=100)
            for _, entries in reply or []:
                ids = []
                for entry_id, fields in entries:
                    Envelope.model_validate(orjson.loads(fields[b"data"]))
                    ids.append(entry_id)
                if ids:
                    await client.xack(stream, "raw", *ids)
                    done += len(ids)
    return total / (time.perf_counter() - started)


async def faststream_consume(url: str, keys: Keys, total: int) -> float | None:
    """FastStream's Redis Streams consumer in batch mode (100 per read, a consumer group, ack after each
    batch) over the same streams, decoding each entry like the raw loop; None when it is not installed."""
    try:
        faststream: Any = importlib.import_module("faststream.redis")  # optional: not a dependency
    except ImportError:
        return None
    client = await connect(Settings.from_url(url))
    streams = [keys.stream(shard, StreamKind.SIGNALS) for shard in keys.all_shards()]
    for stream in streams:
        await client.xgroup_create(stream, "faststream", id="0")
    broker = faststream.RedisBroker(url, logger=None)
    done = 0
    finished = asyncio.Event()

    async def handle(messages: list[dict[str, Any]]) -> None:
        nonlocal done
        for message in messages:
            Envelope.model_validate(orjson.loads(message["data"]))
        done += len(messages)
        if done >= total:
            finished.set()

    for stream in streams:
        sub = faststream.StreamSub(
            stream, group="faststream", consumer="fs-1", batch=True, max_records=100, polling_interval=10
        )
        broker.subscriber(stream=sub)(handle)
    started = time.perf_counter()
    await broker.start()
    try:
        await asyncio.wait_for(finished.wait(), 300)
        return total / (time.perf_counter() - started)
    finally:
        await broker.stop()
        await client.aclose()


async def throughput(url: str, envelopes: list[Envelope]) -> tuple[float, float, float | None]:
    """Coordinator entries applied per second and raw consume-loop entries per second, on the same data."""
    client = await connect(Settings.from_url(url))
    await client.flushall()
    keys = await open_namespace(client, "bench", 8)
    await publish_all(client, keys, envelopes)
    count = len(envelopes)
    raw = await raw_consume(client, keys, count)
    faststream = await faststream_consume(url, keys, count)
    coordinator = Coordinator(client, keys, Policy(), CoordinatorOptions(name="bench", batch=100))
    started = time.perf_counter()
    applied = await coordinator.run(burst=True)
    layer = applied / (time.perf_counter() - started)
    assert applied == count, (applied, count)
    await client.aclose()
    return layer, raw, faststream


def start_coordinator(url: str) -> subprocess.Popen[bytes]:
    return start_process(
        [CLI, "coordinator", "--redis-url", url, "--namespace", "bench", "--tick", "3600", "--name", "bench"]
    )


def start_relay(url: str) -> subprocess.Popen[bytes]:
    """The latency baseline, :mod:`bench.raw_relay`."""
    return start_process([sys.executable, "-m", "bench.raw_relay", url, "--namespace", "bench"])


def start_process(argv: list[str]) -> subprocess.Popen[bytes]:
    """A benchmarked process, run from the repository root, its output discarded."""
    root = Path(__file__).resolve().parent.parent
    return subprocess.Popen(argv, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def follow_findings(
    client: Client, keys: Keys, sent: dict[str, float], want: int, out: list[float]
) -> None:
    # "$" would be re-read as "from now" by every XREAD until a stream returns something: start from ids
    cursors: dict[Any, Any] = {}
    for shard in keys.all_shards():
        stream = keys.stream(shard, StreamKind.FINDINGS)
        last: Any = await client.xrevrange(stream, count=1)
        cursors[stream] = last[0][0] if last else "0-0"
    while len(out) < want:
        reply: Any = await client.xread(cursors, block=1000, count=1000)
        now = time.perf_counter()
        for stream, entries in reply or []:
            name = stream.decode() if isinstance(stream, bytes) else stream
            for entry_id, fields in entries:
                cursors[name] = entry_id
                title = orjson.loads(fields[b"data"])["payload"]["title"]
                if title in sent:
                    out.append(now - sent[title])


async def _paced(publisher: Publisher, envelopes: list[Envelope], rate: int, sent: dict[str, float]) -> None:
    """Publish one envelope every ``1 / rate`` seconds, noting when each was sent (by finding title)."""
    started = time.perf_counter()
    for i, envelope in enumerate(envelopes):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        sent[envelope.payload.title] = time.perf_counter()  # type: ignore[union-attr]
        await publisher.publish(envelope)


async def latency(
    url: str, seconds: float, rate: int, start: Callable[[str], subprocess.Popen[bytes]]
) -> tuple[float, float, int]:
    """p50 and p99 publish -> decision, in ms, of the process ``start`` starts (a coordinator, or the
    raw relay), over ``seconds`` at ``rate`` signals/s, after two seconds of the same load that are not
    recorded (every process and the server warm up first)."""
    client = await connect(Settings.from_url(url))
    await client.flushall()
    keys = await open_namespace(client, "bench", 8)
    process = start(url)
    try:
        publisher = Publisher(client, keys)
        await publish_all(client, keys, findings_only(200, start=10**8))  # leases, groups
        await asyncio.sleep(1)
        await _paced(publisher, findings_only(2 * rate, start=10**7), rate, {})
        total = int(seconds * rate)
        sent: dict[str, float] = {}
        seen: list[float] = []
        reader = await connect(Settings.from_url(url))
        follower = asyncio.create_task(follow_findings(reader, keys, sent, total, seen))
        await asyncio.sleep(0.2)
        await _paced(publisher, findings_only(total), rate, sent)
        await asyncio.wait_for(follower, 60)
        await reader.aclose()
        seen.sort()
        return seen[len(seen) // 2] * 1000, seen[int(len(seen) * 0.99)] * 1000, len(seen)
    finally:
        process.terminate()
        process.wait()
        await client.aclose()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def memory(url: str, count: int) -> tuple[float, float, float]:
    """The coordinator process's RSS after a warm-up, after the first fifth of ``count`` signals, and at
    the end. The state fills up over the first fifth (the idempotency windows reach their 10 000 ids
    per group, the merged findings their reports); what grows after that grows with the signals."""
    client = await connect(Settings.from_url(url))
    await client.flushall()
    keys = await open_namespace(client, "bench", 8)
    coordinator = start_coordinator(url)
    try:
        await publish_all(client, keys, workload(10_000, start=10**8))  # warm up the process
        await _drained(client, keys)
        before = rss_mb(coordinator.pid)
        fifth = before
        step = max(1, min(50_000, count // 5))
        for start in range(0, count, step):
            await publish_all(client, keys, workload(min(step, count - start), start=start))
            await _drained(client, keys)
            # the stream itself lives in Redis, not in the coordinator; keep Redis small meanwhile
            for shard in keys.all_shards():
                await client.xtrim(keys.stream(shard, StreamKind.FINDINGS), maxlen=0)
            if start < count // 5 <= start + step:
                fifth = rss_mb(coordinator.pid)
        return before, fifth, rss_mb(coordinator.pid)
    finally:
        coordinator.terminate()
        coordinator.wait()
        await client.aclose()


async def _drained(client: Client, keys: Keys) -> None:
    """Wait until the coordinator's consumer group has read and acknowledged every entry of every shard;
    a shard whose group does not exist yet (the process is still starting) is not drained."""
    while True:
        lag = 0
        for shard in keys.all_shards():
            groups = await client.xinfo_groups(keys.stream(shard, StreamKind.SIGNALS))
            ours = [g for g in groups if g.get("name") in (GROUP, GROUP.encode())]
            lag += sum(int(g.get("lag") or 0) + int(g.get("pending") or 0) for g in ours) if ours else 1
        if lag == 0:
            return
        await asyncio.sleep(0.1)


async def main(args: argparse.Namespace) -> None:
    tune_gc()  # as the coordinator command does; the raw loop below runs under the same settings
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisProcess(Path(tmp))
        server.start()
        try:
            for name, envelopes in (
                ("mixed workload", workload(args.signals)),
                ("findings only", findings_only(args.signals)),
            ):
                rounds = [await throughput(server.url, envelopes) for _ in range(args.rounds)]
                _report(name, rounds)
            for name, start in (("coordinator", start_coordinator), ("raw redis-py relay", start_relay)):
                p50, p99, n = await latency(server.url, args.latency_seconds, 2000, start)
                print(f"{name} publish->decision at 2000/s:")
                print(f"{'  p50 ms':44} {p50:>10.2f}")
                print(f"{'  p99 ms':44} {p99:>10.2f}   ({n} signals)")
            before, fifth, after = await memory(server.url, args.rss_signals)
            rest = args.rss_signals - args.rss_signals // 5
            rss = "coordinator RSS MB before / at 1/5 / after"
            print(f"{rss:44} {before:>6.1f} / {fifth:.1f} / {after:.1f}")
            growth = f"RSS growth MB over {args.rss_signals:,} signals"
            print(f"{growth:44} {after - before:>10.1f}")
            print(f"{'  of which over the last ' + format(rest, ',') + ' signals':44} {after - fifth:>10.1f}")
        finally:
            server.stop()


def _report(name: str, rounds: list[tuple[float, float, float | None]]) -> None:
    """Best-round rates and the median (and range) of the per-round ratios: this machine's speed drifts
    by tens of percent within a minute, and a ratio of two rates measured a second apart drifts less."""
    print(f"{name} ({len(rounds)} rounds; per second: best round; ratio: median of the rounds', range):")
    print(f"{'  coordinator applied/s (burst)':44} {max(r[0] for r in rounds):>10,.0f}")
    print(f"{'  raw redis-py consume loop msgs/s':44} {max(r[1] for r in rounds):>10,.0f}")
    _ratio("  ratio (target >= 0.5x raw)", [layer / raw for layer, raw, _ in rounds])
    if any(r[2] is None for r in rounds):
        print("  FastStream not installed (pip install -e '.[bench]'): not compared")
        return
    faststream = [(layer, fs) for layer, _, fs in rounds if fs is not None]
    print(f"{'  FastStream batch consumer msgs/s':44} {max(fs for _, fs in faststream):>10,.0f}")
    _ratio("  ratio (target >= 1.5x FastStream)", [layer / fs for layer, fs in faststream])


def _ratio(label: str, ratios: list[float]) -> None:
    print(f"{label:44} {statistics.median(ratios):>10.2f}x  ({min(ratios):.2f}-{max(ratios):.2f})")


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    parser.add_argument(
        "--signals", type=at_least_one, help="signals per throughput round (default 50000; --quick 5000)"
    )
    parser.add_argument(
        "--latency-seconds",
        type=above_zero,
        help="seconds of 2 000 signals/s measured for latency, after 2 not measured (default 10; --quick 2)",
    )
    parser.add_argument(
        "--rss-signals",
        type=at_least_one,
        help="signals applied while the coordinator's RSS is watched (default 1000000; --quick 50000)",
    )
    parser.add_argument(
        "--rounds", type=at_least_one, help="throughput rounds per workload (default 5; --quick 2)"
    )
    args = parser.parse_args()
    full = {"signals": 50_000, "latency_seconds": 10.0, "rss_signals": 1_000_000, "rounds": 5}
    sizes(args, full, {"signals": 5_000, "latency_seconds": 2.0, "rss_signals": 50_000, "rounds": 2})
    os.environ.setdefault("PYTHONHASHSEED", "0")
    asyncio.run(main(args))


if __name__ == "__main__":
    cli()
