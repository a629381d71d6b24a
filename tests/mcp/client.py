"""Drives the grid's MCP endpoint with the official Python MCP SDK's
streamable HTTP client. Called by tests/tests/mcp.rs:

    python3 client.py URL API_KEY CALLS_JSON

CALLS_JSON is a list of [tool, arguments]. Prints one JSON object: the
server's protocol version and name, the tool names, and for each call its
isError flag and text.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


async def main(url: str, key: str, calls: list) -> None:
    out = {"calls": []}
    async with create_mcp_http_client(headers={"x-api-key": key}) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                out["protocolVersion"] = init.protocol_version
                out["serverName"] = init.server_info.name
                tools = await session.list_tools()
                out["tools"] = sorted(t.name for t in tools.tools)
                out["schemas"] = {t.name: t.input_schema for t in tools.tools}
                for name, args in calls:
                    result = await session.call_tool(name, args)
                    text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
                    out["calls"].append({"tool": name, "isError": bool(result.is_error), "text": text})
                await session.send_ping()
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
