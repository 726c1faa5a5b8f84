"""The embedded local server: started on demand, reused, persistent across restarts."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from adapter_kit import CLI

from bus import local_server
from bus.embedded import RedisCluster, RedisProcess, _daemon_exited
from bus.errors import EmbeddedRedisError
from bus.local_server import ensure_local_server, stop_local_server


def test_local_server_is_started_reused_and_keeps_its_data(tmp_path: Path) -> None:
    url = ensure_local_server(tmp_path / "data")
    try:
        assert ensure_local_server(tmp_path / "data") == url
        client = redis.Redis.from_url(url)
        client.set("kept", "yes")
        client.close()
    finally:
        assert stop_local_server(tmp_path / "data")
    assert (tmp_path / "data" / "appendonlydir").is_dir() or (tmp_path / "data" / "appendonly.aof").exists()
    url2 = ensure_local_server(tmp_path / "data")
    assert url2 == url  # on its port of before: whoever followed the server finds it again
    try:
        client = redis.Redis.from_url(url2)
        assert client.get("kept") == b"yes"
        client.close()
    finally:
        stop_local_server(tmp_path / "data")
    assert not stop_local_server(tmp_path / "data")


def test_a_local_server_whose_port_was_taken_meanwhile_starts_on_another(tmp_path: Path) -> None:
    url = ensure_local_server(tmp_path / "data")
    stop_local_server(tmp_path / "data")
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", port))
        taken.listen()
        try:
            other = ensure_local_server(tmp_path / "data")
        finally:
            stop_local_server(tmp_path / "data")
    assert other != url and other.startswith("redis://127.0.0.1:")


def test_down_stops_the_local_server_and_waits_for_it_to_exit(tmp_path: Path) -> None:
    url = ensure_local_server(tmp_path / ".subagent-bus")
    client = redis.Redis.from_url(url)
    pid = int(client.info("server")["process_id"])
    client.close()

    def down() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CLI, "down"], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )

    try:
        done = down()
    finally:
        stop_local_server(tmp_path / ".subagent-bus")
    assert done.returncode == 0, done.stderr
    assert "stopped the local Redis in .subagent-bus/" in done.stderr
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    again = down()
    assert again.returncode == 0 and "no local Redis running" in again.stderr


@pytest.mark.parametrize(
    "damaged",
    [
        "garbage{",
        '{"url": "garbage"}',
        '{"url": "redis://127.0.0.1:1/0?foo=bar"}',
        '{"url": "redis://127.0.0.1:99999"}',
    ],
)
def test_a_server_whose_state_file_is_damaged_is_stopped_not_doubled(tmp_path: Path, damaged: str) -> None:
    data = tmp_path / ".subagent-bus"
    url = ensure_local_server(data)
    client = redis.Redis.from_url(url)
    pid = int(client.info("server")["process_id"])
    client.close()
    (data / "server.json").write_text(damaged)
    try:
        with pytest.raises(EmbeddedRedisError, match=f"pid {pid}.*`subagent-bus down` stops it"):
            ensure_local_server(data)
        done = subprocess.run(
            [CLI, "down"], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0 and "stopped the local Redis" in done.stderr, done.stderr
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        url = ensure_local_server(data)  # now a new one starts, on the same data
    finally:
        stop_local_server(data)
    assert url.startswith("redis://")


def test_a_pid_file_naming_another_process_stops_nothing(tmp_path: Path) -> None:
    # A copied directory names the original's server; a stale pid file, whatever process has that pid now
    original, copy = tmp_path / "a" / ".subagent-bus", tmp_path / "b" / ".subagent-bus"
    url = ensure_local_server(original)
    stranger = subprocess.Popen(["my-language-server", "300"], executable=shutil.which("sleep"), cwd=tmp_path)
    copy.mkdir(parents=True)
    neighbour = subprocess.Popen(["sleep", "300"], cwd=copy)
    try:
        for name in ("server.json", "server.pid"):
            (copy / name).write_bytes((original / name).read_bytes())
        assert not stop_local_server(copy)
        other = ensure_local_server(copy)  # its own server, not a refusal naming the original's
        assert other != url
        stop_local_server(copy)
        (copy / "server.pid").write_text(str(stranger.pid))
        (copy / "server.json").unlink()
        assert not stop_local_server(copy)
        assert stranger.poll() is None
        # a process working in the directory itself is not its server either (a pid given again)
        (copy / "server.pid").write_text(str(neighbour.pid))
        assert not stop_local_server(copy)
        assert neighbour.poll() is None
        assert redis.Redis.from_url(url).ping()
    finally:
        for process in (stranger, neighbour):
            process.kill()
            process.wait()
        stop_local_server(copy)
        stop_local_server(original)


def test_a_stalled_local_server_is_named_not_taken_for_gone(tmp_path: Path) -> None:
    data = tmp_path / ".subagent-bus"
    url = ensure_local_server(data)
    pid = int((data / "server.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(EmbeddedRedisError, match="took the connection but did not answer within 5s"):
            ensure_local_server(data)
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        assert ensure_local_server(data) == url
    finally:
        stop_local_server(data)


def test_a_data_directory_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / ".subagent-bus").write_text("not a directory")
    done = subprocess.run(
        [CLI, "status"], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr
    assert "cannot keep the local Redis in" in done.stderr and "Traceback" not in done.stderr


def test_killed_server_restarts_with_its_append_only_file(fresh_redis: RedisProcess) -> None:
    client = fresh_redis.client()
    client.xadd("s", {"data": b"1"})
    client.close()
    fresh_redis.kill()
    fresh_redis.start()
    client = fresh_redis.client()
    assert client.xlen("s") == 1
    client.close()


def test_cluster_serves_every_slot(redis_cluster: RedisCluster, cluster_url: str) -> None:
    client = redis.RedisCluster.from_url(cluster_url)
    for i in range(30):
        client.set(f"{{k{i}}}x", i)
    assert sorted(int(client.get(f"{{k{i}}}x") or 0) for i in range(30)) == list(range(30))
    client.close()


def test_a_start_interrupted_before_the_server_answered_leaves_it_reachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the first command waits for its new server's first reply: the next command uses it."""

    def interrupted(url: str, seconds: float, process: object, log: Path, pidfile: Path) -> None:
        _pid_written(pidfile)
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(local_server, "wait_for_ping", interrupted)
        with pytest.raises(KeyboardInterrupt):
            ensure_local_server(tmp_path / "data")
    _reached_by_the_next_command(tmp_path / "data")


def test_a_start_interrupted_as_the_server_forked_leaves_it_reachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C the moment the daemon started: the next command finds it by ``server.json``, written before."""
    started = subprocess.run

    def interrupted(*args: Any, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        started(*args, **kwargs)
        _pid_written(tmp_path / "data" / "server.pid")  # a second server would be refused now
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(subprocess, "run", interrupted)
        with pytest.raises(KeyboardInterrupt):
            ensure_local_server(tmp_path / "data")
    _reached_by_the_next_command(tmp_path / "data")


def _pid_written(pidfile: Path) -> None:
    """Wait (up to 10 s) until the daemon has forked and written its pid."""
    deadline = time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text()):
        if time.monotonic() > deadline:
            raise AssertionError(f"the daemon wrote no pid to {pidfile} within 10 s")
        time.sleep(0.01)


def _reached_by_the_next_command(directory: Path) -> None:
    try:
        client = redis.Redis.from_url(ensure_local_server(directory))
        assert client.ping()
        client.close()
    finally:
        assert stop_local_server(directory)


def test_a_pid_file_left_empty_says_the_server_failed(tmp_path: Path) -> None:
    # a server that cannot write its pid file (a full disk) exits: waiting 15 s for it told nothing more
    pidfile = tmp_path / "server.pid"
    pidfile.write_text("")
    assert not _daemon_exited(pidfile)  # made a moment ago: the pid comes next
    os.utime(pidfile, (time.time() - 5, time.time() - 5))
    assert _daemon_exited(pidfile)


def test_a_data_directory_whose_path_is_not_utf_8_is_its_server_s(tmp_path: Path) -> None:
    directory = tmp_path / os.fsdecode(b"lat\xe9n")
    url = ensure_local_server(directory)
    try:
        assert ensure_local_server(directory) == url  # not taken for another directory's server
    finally:
        assert stop_local_server(directory)
