"""A stand-in resume command: records its arguments as JSON, optionally after waiting for a file.

argv_writer.py RECORD [--wait-for PATH] ARG...
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main() -> None:
    record, args = sys.argv[1], sys.argv[2:]
    if args[:1] == ["--wait-for"]:
        gate, args = Path(args[1]), args[2:]
        deadline = time.monotonic() + 120
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    Path(record).write_text(json.dumps(args))


if __name__ == "__main__":
    main()
