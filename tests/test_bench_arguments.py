"""The benchmarks' command lines: sizes below 1 are refused, and an explicit size wins over --quick."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
MODULES = ("bench.bench_bus", "bench.bench_adapter", "bench.bench_coordinator", "bench.bench_scaling")


def _bench(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", module, *args]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("module", [*MODULES, "bench.bench_rules_cpu"])
def test_a_size_below_one_is_a_usage_error(module: str) -> None:
    option = {"bench.bench_bus": "--messages", "bench.bench_adapter": "--repeat"}.get(module, "--signals")
    done = _bench(module, option, "0")
    assert done.returncode == 2 and f"argument {option}: 0 is below 1" in done.stderr, done.stderr


def test_a_size_given_wins_over_quick() -> None:
    done = _bench("bench.bench_bus", "--quick", "--messages", "200", "--repeat", "1")
    assert done.returncode == 0, done.stderr
    assert "200 envelopes of" in done.stdout and ", 1 rounds" in done.stdout
