"""Shard leases and coordinator membership.

A lease is a key holding a random token with a TTL. Only the holder may commit to the shard (the commit
script checks the token), so a process that stalls past its TTL and comes back cannot write anything
stale. Membership is a sorted set of live coordinators scored by expiry (Redis server time, so clocks
of different machines never matter); each process takes at most its fair share of the shards.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["CLAIM_SCRIPT", "MEMBERS_SCRIPT", "PRUNE_SCRIPT", "RELEASE_SCRIPT", "RENEW_SCRIPT", "fair_share"]

RENEW_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: lease, signals stream, dead-letter stream; ARGV: token, group, consumer, min idle ms, cursor, count,
# reason. Claims up to ``count`` entries pending for at least the idle time for the lease holder, without
# counting a delivery (JUSTID), and dead-letters in the same step the ids Redis >= 7 reports as deleted:
# XAUTOCLAIM drops those from the pending list, so a claim made apart from the dead letter could lose
# them for good. Returns ``{next cursor, entries claimed}`` ('0-0' when done), or false when the lease is
# not the caller's.
CLAIM_SCRIPT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
local reply = redis.call('XAUTOCLAIM', KEYS[2], ARGV[2], ARGV[3], ARGV[4], ARGV[5], 'COUNT', ARGV[6], 'JUSTID')
for _, id in ipairs(reply[3] or {}) do
  redis.call('XADD', KEYS[3], '*', 'reason', ARGV[7], 'stream', KEYS[2], 'entry_id', id, 'deliveries', '0')
end
return {reply[1], #reply[2]}
"""

# KEYS[1]: a signals stream; ARGV: group, idle ms. Deletes the group's consumers that hold no pending entry
# and have not read for the idle time: the names of processes that died or were restarted under a new
# name, which would otherwise pile up. One step, so no consumer reads an entry between the check and the
# delete (a deleted consumer's pending entries would be lost); a live one is recreated by its next read.
PRUNE_SCRIPT = """
local pruned = 0
for _, info in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local c = {}
  for i = 1, #info, 2 do c[info[i]] = info[i + 1] end
  if c['pending'] == 0 and c['idle'] >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], c['name'])
    pruned = pruned + 1
  end
end
return pruned
"""

# KEYS[1]: the members set; ARGV: name, ttl in ms, and 'leave' to unregister. Returns the live count.
MEMBERS_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[3] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
end
return redis.call('ZCARD', KEYS[1])
"""


def fair_share(shards: int, members: Any) -> int:
    """How many shards one of ``members`` live coordinators should own at most."""
    return math.ceil(shards / max(1, int(members)))
