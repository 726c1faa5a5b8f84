"""The coordinator's own work per entry, without Redis: decode, rules, encode, the commit's writes.

    python -m bench.bench_rules_cpu [--kind mixed|findings] [--signals N] [--batch B] [--rounds R]
    python -m bench.bench_rules_cpu --instructions [--kind ...] [--signals N] [--batch B]

The benchmark's workloads (:mod:`bench.bench_coordinator`) are encoded, split by shard, and applied in
batches of ``--batch`` entries exactly as a coordinator applies what it reads
(:class:`coordinator.batch.Batch` and the arguments of its commit script), to group states that start
empty in each round. Printed: microseconds per entry, the best round and every round. Timings on a shared
machine drift by tens of percent; ``--instructions`` counts instructions instead, which do not: it runs
this benchmark under valgrind's callgrind with one round and with three, and prints the difference per
entry and round (the set-up cancels out). Comparing two versions of the code that way takes a few minutes
and valgrind.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.arguments import at_least_one
from bench.bench_coordinator import findings_only, workload
from bus.envelope import encode
from bus.keys import Keys, StreamKind
from coordinator.batch import Batch, target_streams
from coordinator.commit import Commit
from coordinator.policy import Policy
from coordinator.runtime import tune_gc
from coordinator.state import GroupState

_ADDED_MS = 1_764_500_000_000
"""The time in the entries' ids (a backlog's: a batch of it was added within a second)."""


def entries(kind: str, signals: int, keys: Keys) -> dict[int, list[bytes]]:
    """The workload's encoded entries by shard, in publishing order."""
    by_shard: dict[int, list[bytes]] = {}
    for envelope in (workload if kind == "mixed" else findings_only)(signals):
        by_shard.setdefault(keys.shard_of(envelope.group_id), []).append(encode(envelope))
    return by_shard


def one_round(by_shard: dict[int, list[bytes]], keys: Keys, policy: Policy, batch: int) -> float:
    """Microseconds per entry to apply every entry, batch by batch, to empty states."""
    total = 0
    started = time.perf_counter()
    for shard, datas in by_shard.items():
        states: dict[str, GroupState] = {}
        targets = target_streams(keys, shard)
        for start in range(0, len(datas), batch):
            commit = Commit("lease", keys.stream(shard, StreamKind.SIGNALS), "version")
            work = Batch(shard, keys, policy, targets, keys.stream(shard, StreamKind.DEAD), commit, states)
            for n, data in enumerate(datas[start : start + batch]):
                work.add(b"%d-%d" % (_ADDED_MS + start, n), data, 1, 5)
            work.write()
            commit.script_args("token", "coordinator", 5000, 0)
            work.committed(states, {})
            total += len(datas[start : start + batch])
    return (time.perf_counter() - started) / total * 1e6


def instructions(args: argparse.Namespace) -> None:
    """Instructions per entry and round, from two runs under callgrind."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind on PATH (e.g. apt-get install valgrind)")
    counts = []
    for rounds in (1, 3):
        command = [
            "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
            sys.executable, "-m", "bench.bench_rules_cpu", "--kind", args.kind,
            "--signals", str(args.signals), "--batch", str(args.batch), "--rounds", str(rounds),
        ]  # fmt: skip
        print(f"running {' '.join(command[3:])} under callgrind ...", file=sys.stderr, flush=True)
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            cwd=Path(__file__).resolve().parent.parent,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        match = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode or match is None:
            raise SystemExit(f"callgrind run failed:\n{done.stderr[-2000:]}")
        counts.append(int(match.group(1)))
    per_entry = (counts[1] - counts[0]) / 2 / args.signals
    print(f"{args.kind}, batches of {args.batch}: {per_entry:,.0f} instructions per entry")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kind", choices=("mixed", "findings"), default="mixed", help="the workload")
    parser.add_argument(
        "--signals", type=at_least_one, default=30_000, help="entries per round (default 30000)"
    )
    parser.add_argument(
        "--batch",
        type=at_least_one,
        default=100,
        help="entries per batch (default 100: a backlog; 1: a trickle)",
    )
    parser.add_argument(
        "--rounds", type=at_least_one, default=5, help="timed rounds, the best printed (default 5)"
    )
    parser.add_argument("--instructions", action="store_true", help="count instructions under callgrind")
    args = parser.parse_args()
    if args.instructions:
        instructions(args)
        return
    keys, policy = Keys("bench", 8), Policy()
    by_shard = entries(args.kind, args.signals, keys)
    tune_gc()  # as the coordinator command does
    times = [one_round(by_shard, keys, policy, args.batch) for _ in range(args.rounds)]
    rounds = " ".join(f"{t:.1f}" for t in times)
    print(f"{args.kind}, batches of {args.batch}: {min(times):.1f} us per entry (rounds: {rounds})")


if __name__ == "__main__":
    main()
