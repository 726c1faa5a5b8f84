"""``--metrics-port``, ``--metrics-host`` and ``--log-json`` of the agent-side long-running commands.

``adapter watch|run|stdin`` and ``launcher`` share them through :func:`ops_options`; the command receives
one ``ops: Ops`` keyword. The names, defaults and ``SUBAGENT_BUS_LOG_JSON`` are the coordinator's.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, ParamSpec, TypeVar

import click

from bus.logs import PLAIN_FORMAT, setup_logging
from bus.metrics import RoleMetrics, serve
from bus.params import EnvOption

__all__ = ["LOG_JSON_ENV", "METRICS_HOST_ENV", "METRICS_PORT_ENV", "Ops", "ops_options", "serve_metrics"]

METRICS_PORT_ENV: Final = "SUBAGENT_BUS_METRICS_PORT"
METRICS_HOST_ENV: Final = "SUBAGENT_BUS_METRICS_HOST"
LOG_JSON_ENV: Final = "SUBAGENT_BUS_LOG_JSON"

P = ParamSpec("P")
R = TypeVar("R")
M = TypeVar("M", bound=RoleMetrics)


@dataclass(frozen=True)
class Ops:
    """How one process is observed: where its metrics are served, how it logs."""

    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    log_json: bool = False

    def setup_logging(self, **context: str) -> None:
        """Log to stderr: ``subagent-bus: message`` lines, or JSON objects carrying ``context`` too."""
        setup_logging(json=self.log_json, context=context, text_format=PLAIN_FORMAT)

    def serve(self, make: Callable[[], M]) -> M | None:
        """The process's metrics, served on ``--metrics-port``; None without one (nothing is counted).

        A port that cannot be bound is an error of the command, before it does anything else.
        """
        if self.metrics_port is None:
            return None
        metrics = make()
        serve_metrics(metrics, self.metrics_port, self.metrics_host)
        return metrics


def serve_metrics(metrics: RoleMetrics, port: int, host: str) -> None:
    """Serve ``metrics`` on ``host:port``; one that cannot be bound is the command's one-line error."""
    where = f"{host}:{port}"
    try:
        serve(metrics, port, host)
    except OSError as exc:  # socket.gaierror (an unknown host) is one too
        raise click.ClickException(f"cannot serve metrics on {where}: {exc.strerror or exc}") from None
    logging.getLogger("subagent_bus.metrics").info("metrics on http://%s/metrics", where)


def ops_options(command: Callable[P, R]) -> Callable[..., R]:
    """Add ``--metrics-port``, ``--metrics-host`` and ``--log-json``; the command gets ``ops: Ops``."""

    @click.option(
        "--metrics-port",
        type=click.IntRange(1, 65535),
        envvar=METRICS_PORT_ENV,
        cls=EnvOption,
        metavar="PORT",
        help="Serve Prometheus metrics on this port (each process needs its own).",
    )
    @click.option(
        "--metrics-host",
        default="127.0.0.1",
        show_default=True,
        envvar=METRICS_HOST_ENV,
        cls=EnvOption,
        help="Address for --metrics-port (0.0.0.0 in a container).",
    )
    @click.option(
        "--log-json",
        is_flag=True,
        envvar=LOG_JSON_ENV,
        cls=EnvOption,
        help="Log one JSON object per line, with the agent and group ids where known.",
    )
    @functools.wraps(command)
    def wrapper(*args: Any, metrics_port: int | None, metrics_host: str, log_json: bool, **kwargs: Any) -> R:
        return command(*args, ops=Ops(metrics_port, metrics_host, log_json), **kwargs)  # type: ignore[arg-type]

    return wrapper
