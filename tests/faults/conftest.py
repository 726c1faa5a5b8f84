"""Fixtures of the fault-injection scenarios, and the summary of their checker reports.

- ``fleet``: starts coordinator processes (:class:`faults.harness.Fleet`) and kills the survivors.
- ``netns``: a network namespace joined to the host by a veth pair (:mod:`faults.netns`); the test is
  skipped, saying why, where namespaces cannot be made (not root, no iproute2, no permission).
- ``fault_report``: records one line per scenario (the checker's counts and the scenario's own facts);
  they are printed as they happen and again in a "fault-injection reports" section at the end of the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from checker import Report

from faults import netns as namespaces
from faults.harness import Fleet, Recorder, report_line

_REPORTS = pytest.StashKey[list[str]]()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    processes = Fleet(tmp_path)
    try:
        yield processes
    finally:
        processes.close()


@pytest.fixture
def netns() -> Iterator[namespaces.NetNamespace]:
    reason = namespaces.unavailable()
    if reason:
        pytest.skip(reason)
    namespace = namespaces.NetNamespace.create()
    try:
        yield namespace
    finally:
        namespace.remove()


@pytest.fixture
def fault_report(request: pytest.FixtureRequest) -> Recorder:
    """``fault_report(report=None, **facts)``: one line for this scenario in the final summary."""
    lines = request.config.stash.setdefault(_REPORTS, [])

    def record(report: Report | None = None, **facts: object) -> None:
        parts = [report_line(report)] if report is not None else []
        parts += [f"{key}={value}" for key, value in facts.items()]
        line = f"{request.node.nodeid}: {' '.join(parts)}"
        lines.append(line)
        print(line)

    return record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    lines = config.stash.get(_REPORTS, [])
    if lines:
        terminalreporter.section("fault-injection reports")
        for line in lines:
            terminalreporter.write_line(line)
