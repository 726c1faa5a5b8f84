"""Run the whole benchmark suite: ``python -m bench [--quick]``.

Each benchmark starts its own Redis server and measures this project against a raw redis-py baseline in
the same run, so the ratios hold on any machine even when absolute numbers do not.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

SUITE = (
    ("transport: publish and consume+ack vs raw redis-py", "bench.bench_bus"),
    ("adapters: parser MB/s, adapter publish vs raw XADD", "bench.bench_adapter"),
    ("coordinator: end to end, latency at 2 000/s, RSS", "bench.bench_coordinator"),
    ("scaling: 1, 2, 3 coordinator processes vs as many raw relays", "bench.bench_scaling"),
)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a minute instead of several")
    args = parser.parse_args()
    failed = 0
    for title, module in SUITE:
        print(f"\n=== {title}  (python -m {module}{' --quick' if args.quick else ''})", flush=True)
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", module, *(["--quick"] if args.quick else [])], check=False
        )
        print(f"--- {time.monotonic() - started:.0f}s, exit {done.returncode}", flush=True)
        failed += done.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
