"""A network namespace joined to the host by a veth pair, whose link a test can cut and heal.

The host end gets ``10.213.X.1/30`` and the namespace end ``10.213.X.2/30`` (X random). A process started
with :attr:`NetNamespace.prefix` (``ip netns exec NAME``) reaches a server listening on the host address
only through that link; taking the host end down drops every packet both ways (established TCP
connections stay open and retransmit, as across a real partition), and bringing it up heals it.
Needs root and iproute2; :func:`unavailable` says why not when it cannot work here.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass

__all__ = ["NetNamespace", "unavailable"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def unavailable() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "network partitions need root (ip netns add)"
    if shutil.which("ip") is None:
        return "network partitions need iproute2's `ip` command"
    probe = f"sbprobe{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"`ip netns add` fails here: {exc}"
    _ip("netns", "del", probe)
    return None


@dataclass(frozen=True)
class NetNamespace:
    name: str
    host_if: str
    host_ip: str
    ns_ip: str

    @property
    def prefix(self) -> list[str]:
        """Run a command inside the namespace (``ip netns exec`` execs it: the pid stays the same)."""
        return ["ip", "netns", "exec", self.name]

    @classmethod
    def create(cls) -> NetNamespace:
        tag = secrets.token_hex(3)
        subnet = f"10.213.{secrets.randbelow(256)}"
        ns = cls(f"sbfault{tag}", f"sbh{tag}", f"{subnet}.1", f"{subnet}.2")
        inner = f"sbn{tag}"
        _ip("netns", "add", ns.name)
        try:
            _ip("link", "add", ns.host_if, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", ns.name)
            _ip("addr", "add", f"{ns.host_ip}/30", "dev", ns.host_if)
            _ip("link", "set", ns.host_if, "up")
            _ip("netns", "exec", ns.name, "ip", "addr", "add", f"{ns.ns_ip}/30", "dev", inner)
            _ip("netns", "exec", ns.name, "ip", "link", "set", inner, "up")
            _ip("netns", "exec", ns.name, "ip", "link", "set", "lo", "up")
        except BaseException:
            ns.remove()
            raise
        return ns

    def cut(self) -> None:
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")

    def remove(self) -> None:
        """Delete the namespace (its veth end goes with it, and so does the host end)."""
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30, check=False)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, timeout=30, check=False)
