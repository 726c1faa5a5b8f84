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


CTRL_C_IN_A_COLLECTION = textwrap.dedent(
    """
    import os, signal
    from coordinator.runtime import tune_gc

    class Pool:  # a connection pool left in a cycle: its __del__ runs in the collection
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, arriving just then

    pool = Pool()
    pool.self = pool
    del pool
    try:
        tune_gc()
    except KeyboardInterrupt:
        print("interrupted")
    else:
        print("went on")
    """
)


def test_a_ctrl_c_during_the_first_collection_interrupts_the_process() -> None:
    """Raised in the __del__ the collection ran, KeyboardInterrupt was printed as ignored, and lost: `up`
    went on running as if Ctrl-C had never been pressed."""
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_IN_A_COLLECTION],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "interrupted", done.stderr
    assert "Exception ignored" not in done.stderr
