"""Prometheus metrics of every long-running process (coordinator, adapter, launcher).

One registry per process, served on ``--metrics-port`` by prometheus-client's own HTTP server. Metric
names are prefixed ``subagent_bus_``; labels stay low-cardinality (shard, envelope type, role, reason) —
never an agent or group id, which would grow without bound. An adapter serves exactly one agent, so it
names its agent and group once, in the constant ``subagent_bus_adapter_info`` series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server

from bus.envelope import Envelope
from bus.results import ResultReport

__all__ = ["REJECTED_REASONS", "AdapterMetrics", "LauncherMetrics", "Metrics", "RoleMetrics", "serve"]

REJECTED_REASONS = ("parse_error", "too_large")
"""Why an adapter did not publish part of its agent's output."""


class RoleMetrics:
    """What every process counts: entries read from and written to the bus, by role and envelope type."""

    def __init__(self, role: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.role = role
        self.entries_in = Counter(
            "subagent_bus_entries_in",
            "Entries read from the bus, by envelope type",
            ["role", "type"],
            registry=self.registry,
        )
        self.entries_out = Counter(
            "subagent_bus_entries_out",
            "Entries written to the bus, by envelope type",
            ["role", "type"],
            registry=self.registry,
        )
        self._children: dict[tuple[Counter, str], Counter] = {}

    def read(self, type_: str, count: int = 1) -> None:
        self._child(self.entries_in, type_).inc(count)

    def wrote(self, type_: str, count: int = 1) -> None:
        self._child(self.entries_out, type_).inc(count)

    def _child(self, counter: Counter, type_: str) -> Counter:
        """``counter`` of this role and ``type_``, looked up once (``labels()`` costs microseconds and an
        adapter counts every envelope it publishes)."""
        child = self._children.get((counter, type_))
        if child is None:
            child = self._children[counter, type_] = counter.labels(self.role, type_)
        return child


class Metrics(RoleMetrics):
    """The coordinator's metrics (``role`` is its label value)."""

    def __init__(self, role: str, registry: CollectorRegistry | None = None) -> None:
        super().__init__(role, registry)
        r = self.registry
        self.dead_letters = Counter(
            "subagent_bus_dead_letters",
            "Entries moved to a dead-letter stream",
            ["role", "shard"],
            registry=r,
        )
        self.pending = Gauge(
            "subagent_bus_pending_entries",
            "Entries delivered but not acknowledged, per shard",
            ["shard"],
            registry=r,
        )
        self.lease = Gauge(
            "subagent_bus_lease_owned", "1 while this process holds the shard's lease", ["shard"], registry=r
        )
        self.commit_seconds = Histogram(
            "subagent_bus_commit_seconds",
            "Time to apply and commit one batch (from its read to the commit's reply)",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )


class AdapterMetrics(RoleMetrics):
    """One adapter's metrics: what it published (``entries_out``), read, rejected and delivered."""

    def __init__(self, agent_id: str, group_id: str, registry: CollectorRegistry | None = None) -> None:
        super().__init__("adapter", registry)
        r = self.registry
        Info("subagent_bus_adapter", "The agent this adapter puts on the bus", registry=r).info(
            {"agent_id": agent_id, "group_id": group_id}
        )
        self.findings = Counter(
            "subagent_bus_adapter_findings",
            "Findings carried by the published result reports (the coordinator publishes each one)",
            registry=r,
        )
        self.read_bytes = Counter(
            "subagent_bus_adapter_read_bytes", "Bytes of the agent's output read", registry=r
        )
        self.rejected = Counter(
            "subagent_bus_adapter_rejected",
            "Parts of the agent's output not published: blocks that do not parse or validate "
            "(parse_error), envelopes over the size limit (too_large)",
            ["reason"],
            registry=r,
        )
        for reason in REJECTED_REASONS:
            self.rejected.labels(reason)
        self.delivered = Counter(
            "subagent_bus_adapter_directives_delivered",
            "Directives handed to the agent, by envelope type",
            ["type"],
            registry=r,
        )
        self.delivery_failures = Counter(
            "subagent_bus_adapter_delivery_failures",
            "Failed attempts to hand a directive to the agent (each is retried, then dead-lettered)",
            ["type"],
            registry=r,
        )

    def published(self, envelope: Envelope) -> None:
        """Count one envelope written to the signals stream (and the findings of a result report)."""
        self.wrote(envelope.type.value)
        if isinstance(envelope.payload, ResultReport) and envelope.payload.findings:
            self.findings.inc(len(envelope.payload.findings))


class LauncherMetrics(RoleMetrics):
    """A launcher's metrics: task entries read (``entries_in``), agents started, failures, running."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__("launcher", registry)
        r = self.registry
        self.launched = Counter(
            "subagent_bus_launcher_launched", "Agents started, each under an adapter", registry=r
        )
        self.launch_failures = Counter(
            "subagent_bus_launcher_launch_failures",
            "Attempts to start a requested agent that failed (each is retried, then dead-lettered)",
            registry=r,
        )
        self.agents = Gauge(
            "subagent_bus_agents_running",
            "Agents this launcher started that still run (but for those waiting for their delegates)",
            registry=r,
        )


def serve(metrics: RoleMetrics, port: int, host: str = "127.0.0.1") -> None:
    """Serve ``metrics`` over HTTP on ``host:port`` from a daemon thread."""
    start_http_server(port, addr=host, registry=metrics.registry)
