"""Shard leases and coordinator membership.

A lease is a key holding a random token with a TTL. Only the holder may commit to the shard (the commit
script checks the token), so a process that stalls past its TTL and comes back cannot write anything
stale. Membership is a sorted set of live coordinators scored by expiry (Redis server time, so clocks
of different machines never matter); each process takes at most its fair share of the shards.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MEMBERS_SCRIPT", "RELEASE_SCRIPT", "RENEW_SCRIPT", "fair_share"]

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
