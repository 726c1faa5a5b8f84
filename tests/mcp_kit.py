"""An MCP client session with ``subagent-bus mcp`` over stdio (the SDK's client), for one agent."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from adapter_kit import CLI
from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

AGENT = "mcp-agent"
GROUP_ID = "g-mcp"


def server(url: str, *args: str) -> StdioServerParameters:
    env = {"SUBAGENT_BUS_REDIS_URL": url, **{k: v for k, v in os.environ.items() if k.startswith("PYTHON")}}
    return StdioServerParameters(command=CLI, args=["mcp", *args], env=env)


@asynccontextmanager
async def session(url: str, *args: str) -> AsyncIterator[ClientSession]:
    """A session with a server for :data:`AGENT` in :data:`GROUP_ID`; ``args``: more options of `mcp`."""
    identity = ("--agent-id", AGENT, "--group", GROUP_ID)
    async with (
        stdio_client(server(url, *identity, *args)) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


async def call(client: ClientSession, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    result = await client.call_tool(name, arguments)
    assert isinstance(result, types.CallToolResult)
    return result


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))
