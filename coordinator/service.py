"""The coordinator service: thin I/O around the pure rules.

One asyncio task per shard. A task that holds the shard's lease reads a batch with XREADGROUP, runs the
rules over its cached group states, and commits states, emitted entries and the XACK in one script
(:mod:`coordinator.commit`). Any process may die at any instant: an uncommitted batch stays pending and
the next owner claims it (XAUTOCLAIM) and applies it first; a committed one is never applied again.
Each process also keeps the namespace's shard count on the server (:mod:`coordinator.namespace_meta`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass, field

from bus import wire
from bus.connection import Client, check_block, translated
from bus.errors import BusError, CommandFailed
from bus.human_key import fingerprint
from bus.keys import Keys, StreamKind
from bus.metrics import Metrics
from bus.waits import wait_for
from coordinator.batch import Batch, Entry, target_streams
from coordinator.commit import COMMIT_SCRIPT, Commit, CommitRefused, CommitResult, stored_version
from coordinator.lease import Leases, fair_share
from coordinator.namespace_meta import NamespaceMeta
from coordinator.policy import Policy
from coordinator.shard import GROUP, Shard, read_head
from coordinator.telemetry import committed, gauge_pending
from coordinator.ticks import TICK_GROUP, add_tick
from coordinator.tombstones import load_tombstones
from coordinator.view import load_shard

__all__ = ["GROUP", "TICK_GROUP", "Coordinator", "CoordinatorOptions"]

log = logging.getLogger("subagent_bus.coordinator")

BATCH_BYTES = 8 * 1024 * 1024
"""The most entry data one batch applies (but a batch has one entry at least, of up to
:data:`~bus.envelope.MAX_ENVELOPE_BYTES`): what a batch writes grows with it, and a commit is one script
argument, which the server refuses over 512 MiB."""


@dataclass(frozen=True, kw_only=True)
class CoordinatorOptions:
    """Tuning of one coordinator process."""

    name: str = field(default_factory=lambda: f"coord-{uuid.uuid4().hex[:8]}")
    batch: int = 100
    block_ms: int = 500
    lease_ttl_ms: int = 5_000
    tick_interval_s: float = 5.0
    max_deliveries: int = 5
    prune_idle_ms: int = 3_600_000
    """Consumers of a shard's group with nothing pending that have not read for this long are removed
    when a coordinator takes the shard over (names of dead or renamed processes)."""
    human_key: bytes | None = field(default=None, repr=False)
    """With a key, only human commands signed with it are applied; the others are dead-lettered
    (:mod:`bus.human_key`)."""


class Coordinator:
    """Applies the protocol's rules to every shard it can lease, exactly once and in order."""

    def __init__(
        self,
        client: Client,
        keys: Keys,
        policy: Policy,
        options: CoordinatorOptions,
        metrics: Metrics | None = None,
    ) -> None:
        check_block(client, options.block_ms)
        self.client = client
        self.metrics = metrics
        self.keys = keys
        self.policy = policy
        self.options = options
        self.applied = 0
        head = read_head(options.name, options.batch)
        self._shards = [
            Shard(
                i,
                signals=keys.stream(i, StreamKind.SIGNALS),
                dead=keys.stream(i, StreamKind.DEAD),
                targets=target_streams(keys, i),
                pipe=wire.Pipe(client, keys.stream(i, StreamKind.SIGNALS), hold=True),
                head=head,
            )
            for i in keys.all_shards()
        ]
        self._share = keys.shards
        self._meta = NamespaceMeta(client, keys)
        self._commit = wire.Script(COMMIT_SCRIPT)
        self._leases = Leases(
            client,
            keys,
            name=options.name,
            ttl_ms=options.lease_ttl_ms,
            prune_idle_ms=options.prune_idle_ms,
            key_mark=fingerprint(options.human_key),
        )
        self._joined = False

    @property
    def owned(self) -> list[int]:
        return [s.index for s in self._shards if s.owned]

    async def join(self, *, burst: bool = False) -> None:
        """Check that every live coordinator of the namespace holds this one's human key, or none as this
        one does (a :class:`~bus.errors.ConfigError` otherwise); register this process as live, unless
        ``burst``. :meth:`run` does it first, if it was not done."""
        if not self._joined:
            count = await self._leases.join(register=not burst)
            if not burst:
                self._share = fair_share(self.keys.shards, count)
            self._joined = True

    async def run(self, *, stop: asyncio.Event | None = None, burst: bool = False) -> int:
        """Run until ``stop`` is set (or, with ``burst``, until every shard is drained); entries applied."""
        stop = stop or asyncio.Event()
        await self.join(burst=burst)
        for shard in self._shards:
            await self._ensure_group(shard.index, starting=True)
        try:
            if burst:
                await self._burst(stop)
            else:
                await asyncio.gather(self._membership(stop), *(self._loop(s, stop) for s in self._shards))
        finally:
            await self._leases.leave()
        return self.applied

    async def _burst(self, stop: asyncio.Event) -> None:
        # Shards are drained side by side, as in a long run: one shard's rules run while another's
        # commit executes in the server.
        await asyncio.gather(*(self._drain(shard, stop) for shard in self._shards))

    async def _drain(self, shard: Shard, stop: asyncio.Event) -> None:
        try:
            if await self._acquire_for_burst(shard, stop):
                while shard.owned and not stop.is_set() and await self._step(shard, block_ms=None):
                    pass
                await self._give_back(shard)
        finally:
            await shard.pipe.close()  # only here and in _loop: the pipe is the shard loop's own

    async def _acquire_for_burst(self, shard: Shard, stop: asyncio.Event) -> bool:
        """The shard's lease for a burst run. A lease left by a process that died runs out within its TTL
        (a burst run started right after a crash waits for it, rather than apply nothing); one that a live
        process keeps renewing is left to that process, which applies the shard."""
        seen: tuple[str, int] | None = None
        while not stop.is_set():
            if await self._acquire(shard):
                return True
            token, left = await self._leases.holder(shard.index)
            if token is None:
                continue  # it ran out just now
            if seen is not None and seen[0] == token and left > seen[1]:
                log.info("shard %d is held by %s, which applies it", shard.index, token.rpartition(":")[0])
                return False
            seen = (token, left)
            await wait_for(stop, min(max(left, 0), 1000) / 1000 + 0.05)
        return False

    async def _loop(self, shard: Shard, stop: asyncio.Event) -> None:
        try:
            await self._follow(shard, stop)
        finally:
            await shard.pipe.close()

    async def _follow(self, shard: Shard, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                if shard.shed:
                    await self._shed_now(shard)
                if not shard.owned and not await self._acquire(shard):
                    await wait_for(stop, self.options.lease_ttl_ms / 2000)
                    continue
                await self._maybe_tick(shard)
                await self._step(shard, block_ms=self.options.block_ms)
                if shard.failures:
                    log.info("shard %d: working again after %d failed tries", shard.index, shard.failures)
                    shard.failures = 0
            except BusError as exc:
                if shard.owned and "UNBLOCKED " in str(exc) and await self._read_again(shard, exc):
                    continue
                if shard.failures % 60 == 0:  # an outage is a line a minute per shard, not one a second
                    log.warning("shard %d: %s; retrying every second", shard.index, exc)
                shard.failures += 1
                shard.refused = isinstance(exc, CommitRefused)
                shard.owned = False
                await wait_for(stop, 1.0)
                if "NOGROUP" in str(exc):  # the server lost the stream or its group (data loss, failover)
                    await self._ensure_group(shard.index)
        with contextlib.suppress(BusError):
            await self._finish_held(shard)
        await self._give_back(shard)

    async def _read_again(self, shard: Shard, exc: BusError) -> bool:
        """A blocking read the server ended (its master became a replica in a failover): the shard is
        taken over again at once, its lease kept (given up, it was taken again only once the lease had
        expired, the shards swapping between coordinators); whether that went through. The state is
        reloaded: the read may be the one sent behind a commit, which went through."""
        log.info("shard %d: %s; reading again", shard.index, exc)
        try:
            await self._take_over(shard)
        except BusError:
            return False
        return shard.owned

    async def _finish_held(self, shard: Shard) -> None:
        """On the way out, apply every entry pending on the shard: those this process holds (claimed at
        a take-over, or read and not yet committed) and those a deposed owner read too late to commit,
        which a successor would otherwise claim only after a lease period. So a graceful stop leaves no
        pending entry behind, and nothing at all when it is the last process to stop."""
        if not shard.owned:
            return
        await self._claim(shard, idle_ms=0, count=1000, until_done=True)
        shard.need_pending, shard.rest = True, None  # the claimed entries may come before the rest
        while shard.owned and shard.need_pending and await self._step(shard, block_ms=None):
            pass

    # -- ownership -----------------------------------------------------------------------------

    def _version_key(self, shard: Shard) -> str:
        return self.keys.state(shard.index, "version")

    async def _membership(self, stop: asyncio.Event) -> None:
        failing = False
        while not stop.is_set():
            try:
                self._share = fair_share(self.keys.shards, await self._leases.heartbeat())
                await self._meta.keep()
                self._shed()
                await gauge_pending(self.client, [s for s in self._shards if s.owned], self.metrics)
                failing = False
            except BusError as exc:  # Redis restarting or unreachable: keep trying, like the shard loops
                if not failing:
                    log.warning("membership: %s; retrying", exc)
                failing = True
            await wait_for(stop, self.options.lease_ttl_ms / 3000)

    def _shed(self) -> None:
        """Have shards above the fair share given back, so a newly started process gets some.

        Each by its own loop, between two steps (:meth:`_shed_now`): given back from here, a shard in the
        middle of its take-over was taken again by the take-over's lease renewal, and its loop went on to
        commit a batch against the emptied states, as if every group were new."""
        extra = len(self.owned) - self._share
        for shard in [s for s in self._shards if s.owned][: max(0, extra)]:
            shard.shed = True

    async def _shed_now(self, shard: Shard) -> None:
        shard.shed = False
        if shard.owned and len(self.owned) > self._share:  # the share may have grown since
            await self._give_back(shard)
            log.info("shard %d released to balance the load", shard.index)

    async def _give_back(self, shard: Shard) -> None:
        if shard.owned:
            await self._leases.release(shard.index, shard.token)
            shard.owned = False
            shard.groups = {}
            self._gauge_lease(shard)

    async def _acquire(self, shard: Shard) -> bool:
        if len(self.owned) >= self._share:
            return False
        token = await self._leases.take(shard.index)
        if token is None:
            return False
        shard.token, shard.owned, shard.need_pending = token, True, True
        self._gauge_lease(shard)
        await self._take_over(shard)
        if not shard.owned:  # lost while loading
            return False
        log.info("shard %d acquired by %s", shard.index, self.options.name)
        return True

    async def _take_over(self, shard: Shard) -> None:
        """Claim every pending entry of the group (from dead or stalled owners) and reload the state."""
        # A commit the server cannot run (NOSCRIPT) loses the replies of the read sent behind it, and
        # those entries come again from the pending list, counted as delivered twice.
        await self._commit.load(shard.pipe)
        await self._claim(shard, idle_ms=0, count=1000, until_done=True)
        pruned = await self._leases.prune(shard.pipe, shard.index, GROUP)
        if pruned:
            log.info("shard %d: removed %d idle consumers", shard.index, pruned, extra={"shard": shard.index})
        with translated():
            version = await self.client.get(self._version_key(shard))
        # read before the states; only this lease holder commits
        shard.version = stored_version(version, self._version_key(shard))
        # decoded in a worker thread, so that the lease is kept while a shard of huge states loads
        with translated():
            shard.tombstones = await load_tombstones(self.client, self.keys, shard.index)
        load = load_shard(self.client, self.keys, shard.index, in_thread=True)
        shard.groups, held = await self._leases.hold(shard.pipe, shard.index, shard.token, load)
        # every group of the shard had its last tick (but groups that came after it, and states stored
        # before ticks were kept); with none, the stream has it
        ticks = [state.ticked_at for state in shard.groups.values() if state.ticked_at is not None]
        shard.ticked_at = max(ticks, default=None) or await shard.stream_tick()
        if not held:
            self._lost(shard)
        shard.need_pending, shard.rest = True, None

    async def _claim_stale(self, shard: Shard) -> bool:
        """Claim entries another consumer has held longer than a lease: a deposed owner's late reads.

        Such an owner can never commit them (its lease is gone), and they would otherwise wait for the
        shard's next entry to trip the order check.
        """
        return await self._claim(shard, idle_ms=self.options.lease_ttl_ms, count=100) > 0

    async def _claim(self, shard: Shard, *, idle_ms: int, count: int, until_done: bool = False) -> int:
        return await self._leases.claim(
            shard.pipe, shard.index, shard.token, GROUP, idle_ms=idle_ms, count=count, until_done=until_done
        )

    async def _ensure_group(self, index: int, *, starting: bool = False) -> None:
        """Create the shard's consumer group unless it exists. Starting, a refusal other than that is a
        misconfiguration that no retry mends (a cluster node forced off the cluster client sends the
        shard's keys to another node): it stops the process, rather than a shard retrying for ever."""
        stream = self.keys.stream(index, StreamKind.SIGNALS)
        try:
            with translated():
                await self.client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except BusError as exc:
            if starting and isinstance(exc, CommandFailed) and "BUSYGROUP" not in str(exc):
                raise

    async def _maybe_tick(self, shard: Shard) -> None:
        now = time.monotonic()
        if now - shard.last_tick >= self.options.tick_interval_s:
            shard.last_tick = now
            await add_tick(self.client, shard, self.options.name)

    # -- one batch -----------------------------------------------------------------------------

    async def _step(self, shard: Shard, *, block_ms: int | None) -> bool:
        """Read, apply and commit one batch; False when there was nothing to read."""
        entries = await shard.read(block_ms)
        if not entries:
            if not await self._leases.renew(shard.pipe, shard.index, shard.token):
                self._lost(shard)
            elif await self._claim_stale(shard):
                shard.need_pending = True
            return False
        # A batch of a hundred entries of a few MiB each would be applied past the lease and committed in
        # one script argument over the server's limit (512 MiB): it could never commit.
        entries = shard.take(entries, BATCH_BYTES)
        started = time.perf_counter()
        batch = Batch(
            shard.index,
            self.keys,
            self.policy,
            shard.targets,
            shard.dead,
            Commit(self._leases.key(shard.index), shard.signals, self._version_key(shard)),
            shard.groups,
            shard.tombstones,
            shard.ticked_at,
            human_key=self.options.human_key,
        )
        counting = shard.need_pending and not shard.refused
        counts = await shard.delivery_counts(self.client, entries) if counting else {}
        if not await self._apply(shard, batch, entries, counts):
            self._lost(shard)
            return True
        batch.write()
        result = await shard.commit(self._commit, batch.commit, self.options.lease_ttl_ms, block_ms)
        if result is CommitResult.OK:
            shard.refused = False
            batch.committed(shard.groups, shard.tombstones)
            shard.ticked_at = batch.ticked_at
            shard.version += 1
            self.applied += len(entries)
            # until the commit's reply: the read sent behind it may wait for new entries much longer
            done = shard.pipe.first_reply_at
            if done < started:  # the replies came through redis-py's pipeline (a cluster redirection)
                done = time.perf_counter()
            committed(batch, done - started, self.metrics)
        elif result is CommitResult.LEASE_LOST:
            self._lost(shard)
        elif result is CommitResult.STALE:
            log.warning("shard %d: the server lost committed writes; reloading its state", shard.index)
            await self._take_over(shard)
        else:
            log.warning("shard %d: older entries pending elsewhere; claiming them first", shard.index)
            await self._take_over(shard)
        return True

    async def _apply(
        self, shard: Shard, batch: Batch, entries: list[Entry], counts: dict[bytes, int]
    ) -> bool:
        """Apply the entries to the batch; False when the lease was lost meanwhile.

        A batch of large entries may take longer than the lease lasts: renewed every third of it (which
        lets the other shards' loops renew theirs too), it is not lost, read again and, after as many
        deliveries, dead-lettered whole, though none of its entries is at fault."""
        every = self.options.lease_ttl_ms / 3000
        renew_at = time.monotonic() + every
        for entry_id, data in entries:
            batch.add(entry_id, data, counts.get(entry_id, 1), self.options.max_deliveries)
            if time.monotonic() > renew_at:
                if not await self._leases.renew(shard.pipe, shard.index, shard.token):
                    return False
                renew_at = time.monotonic() + every
        return True

    def _lost(self, shard: Shard) -> None:
        if shard.owned:  # not when this process gave it back meanwhile (rebalancing): that was said
            log.warning("shard %d: lease lost; nothing from the last batch was committed", shard.index)
        shard.owned = False
        shard.groups = {}
        self._gauge_lease(shard)

    def _gauge_lease(self, shard: Shard) -> None:
        if self.metrics:
            self.metrics.lease.labels(str(shard.index)).set(1 if shard.owned else 0)
