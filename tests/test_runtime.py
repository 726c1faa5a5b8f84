"""The coordinator process's collector settings, in a process of their own (they are process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, weakref
    from coordinator.runtime import collect_garbage, tune_gc

    class Node:
        pass

    async def main():
        tune_gc()
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        node = Node()
        node.self = node  # a reference cycle: only a collection frees it
        alive = weakref.ref(node)
        del node
        for _ in range(10_000):
            Node()  # allocations no longer start a collection
        assert alive() is not None
        stop = asyncio.Event()
        collector = asyncio.create_task(collect_garbage(stop, interval_s=0.01))
        async with asyncio.timeout(10):
            while alive() is not None:
                await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(collector, 1)

    asyncio.run(main())
    print("ok")
    """
)


def test_the_collector_runs_on_the_clock_not_on_allocations() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
