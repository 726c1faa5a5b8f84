"""Prometheus metrics of every long-running process (coordinator, adapter, launcher).

One registry per process, served on ``--metrics-port`` by prometheus-client's own HTTP server. Metric
names are prefixed ``subagent_bus_``; labels stay low-cardinality (shard, envelope type, role) — never an
agent or group id, which would grow without bound.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["Metrics", "serve"]


class Metrics:
    """The metrics one process exposes; unused ones simply stay at zero."""

    def __init__(self, role: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.role = role
        r = self.registry
        self.entries_in = Counter(
            "subagent_bus_entries_in",
            "Entries read from the bus, by envelope type",
            ["role", "type"],
            registry=r,
        )
        self.entries_out = Counter(
            "subagent_bus_entries_out",
            "Entries written to the bus, by envelope type",
            ["role", "type"],
            registry=r,
        )
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
            "Time to apply and commit one batch",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.agents = Gauge(
            "subagent_bus_agents_running", "Agent processes alive under this process", registry=r
        )

    def read(self, type_: str, count: int = 1) -> None:
        self.entries_in.labels(self.role, type_).inc(count)

    def wrote(self, type_: str, count: int = 1) -> None:
        self.entries_out.labels(self.role, type_).inc(count)


def serve(metrics: Metrics, port: int, host: str = "127.0.0.1") -> None:
    """Serve ``metrics`` over HTTP on ``host:port`` from a daemon thread."""
    start_http_server(port, addr=host, registry=metrics.registry)
