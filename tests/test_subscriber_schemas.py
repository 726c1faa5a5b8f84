"""What a third-party subscriber sees: the demo's real streams, read with a plain Redis client and checked
against the published JSON Schemas and the README's key layout, without the bus library.

Everything here is what a program in another language would do: SCAN for the namespace's keys, compute a
group's shard as ``crc32(group_id) % shards``, parse the ``data`` field as JSON and validate it against the
schema ``subagent-bus schema TYPE`` prints.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import redis

CLI = str(Path(sys.executable).parent / "subagent-bus")
KEY = re.compile(r"^\{(?P<ns>[A-Za-z0-9_.-]+):(?P<shard>\d+)\}:(?P<rest>.+)$")
STREAM = re.compile(r"^(signals|events|findings|tasks|dead|inbox:.+)$")
ZONED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
KINDS = {  # the kinds of envelope each stream carries (README, Architecture)
    "signals": {"signal", "result", "finding", "human", "event"},
    "events": {"event"},
    "findings": {"finding"},
    "tasks": {"directive"},
    "inbox": {"directive"},
}


def _schema(type_name: str, cache: dict[str, Any]) -> Any:
    if type_name not in cache:
        printed = subprocess.run([CLI, "schema", type_name], capture_output=True, check=True, timeout=60)
        cache[type_name] = json.loads(printed.stdout)
    return cache[type_name]


def test_every_entry_of_a_real_run_matches_its_published_schema_and_the_key_layout(
    redis_url: str, tmp_path: Path
) -> None:
    demo = subprocess.run(
        [CLI, "demo", "--redis-url", redis_url, "--workdir", str(tmp_path), "--json"],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr.decode()[-2000:]
    namespace = json.loads(demo.stdout)["namespace"]
    raw = redis.Redis.from_url(redis_url)
    try:
        shards = int(raw.get(f"{{{namespace}}}:meta") or 0)
        assert shards >= 1
        schemas: dict[str, Any] = {}
        seen: Counter[tuple[str, str]] = Counter()
        for key in sorted(k.decode() for k in raw.scan_iter(match=f"{{{namespace}:*", _type="stream")):
            where = KEY.match(key)
            assert where and where["ns"] == namespace and int(where["shard"]) < shards, key
            assert STREAM.match(where["rest"]), f"{key} is not a stream the README names"
            stream = where["rest"].split(":")[0]
            if stream == "dead":
                continue
            reply: Any = raw.xrange(key)
            for entry_id, fields in reply:
                assert list(fields) == [b"data"], f"{key} {entry_id!r}: fields {list(fields)}"
                envelope = json.loads(fields[b"data"])
                jsonschema.validate(envelope, _schema(envelope["type"], schemas))
                assert envelope["kind"] in KINDS[stream], (key, envelope["kind"])
                assert ZONED.match(envelope["ts"]), envelope["ts"]
                if envelope["group_id"] != "*":  # a TICK applies to every group of its shard
                    assert zlib.crc32(envelope["group_id"].encode()) % shards == int(where["shard"]), key
                if stream == "inbox":
                    assert where["rest"] == f"inbox:{envelope['agent_id']}"
                seen[stream, envelope["type"]] += 1
    finally:
        raw.close()
    assert {stream for stream, _ in seen} == set(KINDS), seen  # the run wrote to every kind of stream
    assert len({type_ for _, type_ in seen}) >= 15, seen
